package localapi

import (
	"testing"
	"time"
)

// TestEventHold: the hold after a write to a subscriber is its share of
// the write budget, at most the configured interval, and nothing when
// that is not positive.
func TestEventHold(t *testing.T) {
	for _, c := range []struct {
		streams int64
		max     time.Duration
		want    time.Duration
	}{
		{0, DefaultEventFlushInterval, 0},
		{1, DefaultEventFlushInterval, 500 * time.Microsecond},
		{10, DefaultEventFlushInterval, 5 * time.Millisecond},
		{99, DefaultEventFlushInterval, 49500 * time.Microsecond},
		{100, DefaultEventFlushInterval, DefaultEventFlushInterval},
		{256, DefaultEventFlushInterval, DefaultEventFlushInterval},
		{100, 5 * time.Millisecond, 5 * time.Millisecond},
		{100, -1, 0},
		{100, 0, 0},
	} {
		if got := eventHold(c.streams, c.max); got != c.want {
			t.Errorf("eventHold(%d, %v) = %v, want %v", c.streams, c.max, got, c.want)
		}
	}
}
