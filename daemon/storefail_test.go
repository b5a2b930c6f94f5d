package daemon

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A failing store is logged once when it starts, at most every
// storeFailLogEvery while it lasts, and once when it ends.
func TestStoreFailuresLogQuietly(t *testing.T) {
	clock := newClock()
	var buf bytes.Buffer
	f := &storeFailures{now: clock.Now, logger: slog.New(slog.NewTextHandler(&buf, nil))}
	diskFull := errors.New("no space left on device")
	lines := func() int { return strings.Count(buf.String(), "\n") }

	// Nothing failed: nothing to say.
	f.ok()
	// Four workers, one claim a second each, for a minute.
	for range 4 * 60 {
		f.failed(diskFull)
		clock.Advance(time.Second / 4)
	}
	if n := lines(); n != 1 || !strings.Contains(buf.String(), "no space left") {
		t.Fatalf("a minute of failures logged %d lines:\n%s", n, buf.String())
	}
	clock.Advance(storeFailLogEvery)
	f.failed(diskFull)
	f.failed(diskFull)
	if n := lines(); n != 2 || !strings.Contains(buf.String(), "still fails") {
		t.Fatalf("after %v: %d lines:\n%s", storeFailLogEvery, n, buf.String())
	}
	f.ok()
	f.ok()
	if n := lines(); n != 3 || !strings.Contains(buf.String(), "works again") || !strings.Contains(buf.String(), "failures=242") {
		t.Fatalf("recovery: %d lines:\n%s", n, buf.String())
	}
	f.failed(diskFull) // a new run is logged again
	if n := lines(); n != 4 {
		t.Fatalf("a new failure after recovery: %d lines", n)
	}
}

// A worker's wait after failed claims doubles from idleRetry to
// maxIdleRetry.
func TestIdleBackoff(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := idleBackoff(i + 1); got != w {
			t.Errorf("idleBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := idleBackoff(1000); got != maxIdleRetry {
		t.Errorf("idleBackoff(1000) = %v", got)
	}
}
