package transport

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"007", 7 * time.Second, true},
		{"99999999999999999999999", time.Duration(1<<63 - 1), true}, // saturates
		{"9223372036", 9223372036 * time.Second, true},
		{"9223372037", time.Duration(1<<63 - 1), true},
		{clock.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Wed, 02 Dec 2026 10:01:00 GMT", time.Minute, true},     // IMF-fixdate
		{"Wednesday, 02-Dec-26 10:01:00 GMT", time.Minute, true}, // RFC 850
		{"Wed Dec  2 10:01:00 2026", time.Minute, true},          // asctime
		{"Wed, 02 Dec 2026 09:00:00 GMT", 0, true},               // in the past
		{"Fri, 31 Dec 9999 23:59:59 GMT", clockTo(9999), true},   // far future, no overflow
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"+3", 0, false},
		{"12s", 0, false},
		{"tomorrow", 0, false},
		{"Wed, 02 Dec 2026 10:01:00", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, clock)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// clockTo is the duration from clock to the end of year y, saturated.
func clockTo(y int) time.Duration {
	return time.Date(y, 12, 31, 23, 59, 59, 0, time.UTC).Sub(clock)
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", " 5 ", "99999999999999999999999", "-1", "1.5",
		"Wed, 02 Dec 2026 10:01:00 GMT", "Wednesday, 02-Dec-26 10:01:00 GMT", "Wed Dec  2 10:01:00 2026", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, clock)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v < 0", s, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v with ok false", s, d)
		}
		// Delta-seconds round-trip.
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n < 1<<32 && s[0] >= '0' && s[0] <= '9' {
			if !ok || d != time.Duration(n)*time.Second {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %ds", s, d, ok, n)
			}
		}
	})
}
