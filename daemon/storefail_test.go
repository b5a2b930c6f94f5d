package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
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

// logRecord is one captured log line.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logCapture is a slog.Handler that keeps every record and lets a test
// wait for one.
type logCapture struct {
	t       testing.TB
	mu      sync.Mutex
	recs    []logRecord
	changed chan struct{}
}

func newLogCapture(t testing.TB) *logCapture {
	return &logCapture{t: t, changed: make(chan struct{})}
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCapture) WithGroup(string) slog.Handler            { return c }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	if testing.Verbose() {
		c.t.Logf("%s %s %v", r.Level, r.Message, rec.attrs)
	}
	c.mu.Lock()
	c.recs = append(c.recs, rec)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// records returns the records so far that match.
func (c *logCapture) records(match func(logRecord) bool) []logRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []logRecord
	for _, r := range c.recs {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// wait blocks until n records match.
func (c *logCapture) wait(t testing.TB, what string, n int, match func(logRecord) bool) []logRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if rs := c.records(match); len(rs) >= n {
			return rs
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; the log:\n%s", what, c)
		}
	}
}

func (c *logCapture) String() string {
	var b strings.Builder
	for _, r := range c.records(func(logRecord) bool { return true }) {
		fmt.Fprintf(&b, "%s %s %v\n", r.level, r.msg, r.attrs)
	}
	return b.String()
}

func atLevel(l slog.Level) func(logRecord) bool {
	return func(r logRecord) bool { return r.level == l }
}

// At most maxKeptOutcomes answers are kept; a newer answer of a kept
// operation replaces it; the ones past the bound are counted, and once
// space returns every kept answer is written. (The store's full disk is
// simulated by the write itself: a 4 MB disk cannot hold a thousand
// operations in flight.)
func TestKeptAnswersAreBounded(t *testing.T) {
	logs := newLogCapture(t)
	e := setup(t, envOpts{cfg: Config{Logger: slog.New(logs)}})
	errFull := fmt.Errorf("%w: simulated", queue.ErrStorageFull)
	var full atomic.Bool
	full.Store(true)
	var written sync.Map // operation id → times written
	writer := func(id string) func(context.Context) error {
		return func(context.Context) error {
			if full.Load() {
				return errFull
			}
			n, _ := written.LoadOrStore(id, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}
	}
	opID := func(i int) string { return fmt.Sprintf("op%04d", i) }

	// The first answer kept waits for space in its goroutine; the others
	// are kept beside it.
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		e.d.storeErr("complete", queue.Operation{ID: opID(0)}, errFull, writer(opID(0)))
	}()
	logs.wait(t, "the first warning", 1, atLevel(slog.LevelWarn))
	const over = 5
	for i := 1; i < maxKeptOutcomes+over; i++ {
		e.d.storeErr("complete", queue.Operation{ID: opID(i)}, errFull, writer(opID(i)))
	}
	e.d.storeErr("retry", queue.Operation{ID: opID(1)}, errFull, writer(opID(1))) // replaces op0001's
	if n := len(e.d.storeFail.snapshotKept()); n != maxKeptOutcomes {
		t.Fatalf("%d answers kept, want %d", n, maxKeptOutcomes)
	}

	full.Store(false)
	e.d.Notify()
	select {
	case <-flushed:
	case <-time.After(20 * time.Second):
		t.Fatal("the kept answers were not written")
	}
	for i := range maxKeptOutcomes + over {
		n, ok := written.Load(opID(i))
		switch {
		case i < maxKeptOutcomes && (!ok || n.(*atomic.Int64).Load() != 1):
			t.Errorf("%s: kept, written %v times, want 1", opID(i), n)
		case i >= maxKeptOutcomes && ok:
			t.Errorf("%s: past the bound, written", opID(i))
		}
	}
	rec := logs.wait(t, "the recovery line", 1, func(r logRecord) bool { return strings.Contains(r.msg, "space returned") })[0]
	if rec.attrs["recorded"] != fmt.Sprint(maxKeptOutcomes) || rec.attrs["dropped"] != fmt.Sprint(over) {
		t.Errorf("recovery line %v, want recorded=%d dropped=%d", rec.attrs, maxKeptOutcomes, over)
	}
	if n := len(e.d.storeFail.snapshotKept()); n != 0 {
		t.Errorf("%d answers still kept", n)
	}
}

// A disk that fills and empties again and again warns at most once a
// keptLogEvery, with what it did not log, and says that space returned
// only after a run it warned of.
func TestKeptAnswersLogQuietly(t *testing.T) {
	clock := newClock()
	logs := newLogCapture(t)
	f := &storeFailures{now: clock.Now, logger: slog.New(logs)}
	errFull := fmt.Errorf("%w: simulated", queue.ErrStorageFull)
	record := func(context.Context) error { return nil }
	run := func(i int) {
		t.Helper()
		if !f.keep("complete", fmt.Sprintf("op%d", i), errFull, record) {
			t.Fatalf("run %d: the first answer kept does not flush", i)
		}
		for _, o := range f.snapshotKept() {
			if f.settle(o, nil) {
				t.Fatalf("run %d: a recorded answer is still kept", i)
			}
		}
		if !f.endFlush(false) {
			t.Fatalf("run %d: the flush does not end with nothing kept", i)
		}
	}
	// Ten runs, a second apart.
	for i := range 10 {
		run(i)
		clock.Advance(time.Second)
	}
	if w, i := len(logs.records(atLevel(slog.LevelWarn))), len(logs.records(atLevel(slog.LevelInfo))); w != 1 || i != 1 {
		t.Fatalf("ten runs in ten seconds: %d warnings and %d info lines, want 1 and 1:\n%s", w, i, logs)
	}
	clock.Advance(keptLogEvery)
	run(10)
	warns := logs.records(atLevel(slog.LevelWarn))
	if len(warns) != 2 || warns[1].attrs["suppressed"] != "9" {
		t.Fatalf("a minute later: want a second warning counting 9 not logged:\n%s", logs)
	}
	if errs := logs.records(atLevel(slog.LevelError)); len(errs) > 0 {
		t.Fatalf("ERROR lines:\n%s", logs)
	}
}
