package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// aheadPage is page n (1 to 3) of a three-page feed of one record each:
// cursors "1", "2", "3"; after "3" nothing is new.
func aheadPage(after string) string {
	n := map[string]int{"": 1, "1": 2, "2": 3}[after]
	if n == 0 {
		return `{"changes":[],"cursor":"` + after + `","hasMore":false}`
	}
	return fmt.Sprintf(`{"changes":[{"type":"note","id":"s%d","clientId":"n%d","version":1,"data":{"n":%d},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"%d","hasMore":%t}`,
		n, n, n, n, n < 3)
}

// afterOf is the cursor of a fakeFeed query.
func afterOf(q string) string {
	after, _, _ := strings.Cut(q, "|")
	return after
}

// waitHit waits for the feed to be asked for the page after cursor.
func waitHit(t *testing.T, hits <-chan string, after string) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case a := <-hits:
			if a == after {
				return
			}
		case <-deadline.C:
			t.Fatalf("the page after %q was never asked for", after)
		}
	}
}

func (f *fakeFeed) asked(after string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, q := range f.queries {
		if q == "after="+after+"&limit=500" || after == "" && q == "limit=500" {
			n++
		}
	}
	return n
}

// The next page is read while one is applied: the read of page 2 reaches
// the server while page 1 cannot be applied yet (the test holds the
// account's write lock, as a logout would), and the pass ends with every
// page applied in order, each with its cursor.
func TestPullReadsAheadWhileApplying(t *testing.T) {
	t.Parallel()
	locked := make(chan struct{})
	hits := make(chan string, 16)
	d, _, _ := startPuller(t, PullOn, func(_, q string) (int, string) {
		after := afterOf(q)
		if after == "" {
			<-locked // page 1 goes out once nothing can apply it
		}
		hits <- after
		return 200, aheadPage(after)
	})
	var unlock sync.Once
	d.writes.Lock()
	t.Cleanup(func() { unlock.Do(d.writes.Unlock) }) // before the daemon stops
	close(locked)
	waitHit(t, hits, "1")
	st, err := d.store.LoadPullState("alice")
	unlock.Do(d.writes.Unlock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor != "" {
		t.Fatalf("page 1 applied (cursor %q) before page 2 was read: no read ahead, or the test's lock failed", st.Cursor)
	}
	p := waitPull(t, d, "the pass's end", func(p PullStatus) bool { return p.State == PullStateIdle && p.Received == 3 })
	if p.BootstrapReceived != 0 {
		t.Fatalf("pass still under way: %+v", p)
	}
	st, err = d.store.LoadPullState("alice")
	if err != nil || st.Cursor != "3" || !st.Bootstrapped {
		t.Fatalf("pull state %+v, %v; want cursor 3, bootstrapped", st, err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := d.store.GetEntity("alice", "note", fmt.Sprintf("n%d", i)); err != nil {
			t.Fatalf("n%d: %v", i, err)
		}
	}
}

// A page read ahead that fails is a failed read as before: backoff,
// then the page after the stored cursor is read again; a 410 read ahead
// restarts the pass from the beginning.
func TestPullReadAheadFailureIsAFailedRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		body   string
		again  string // the cursor read again after the failure
	}{
		{"error", 500, `{"error":{"code":"internal","message":"boom"}}`, "1"},
		{"cursor expired", 410, `{"error":{"code":"cursor_expired","message":"swept"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			failed := false
			d, f, _ := startPuller(t, PullOn, func(_, q string) (int, string) {
				after := afterOf(q)
				mu.Lock()
				defer mu.Unlock()
				if after == "1" && !failed {
					failed = true
					return tc.status, tc.body
				}
				return 200, aheadPage(after)
			})
			waitPull(t, d, "the pass's end", func(p PullStatus) bool {
				st, err := d.store.LoadPullState("alice")
				return err == nil && st.Bootstrapped && st.Cursor == "3" && p.State == PullStateIdle
			})
			if n := f.asked(tc.again); n != 2 {
				t.Fatalf("the page after %q asked for %d times, want 2 (queries %q)", tc.again, n, f.queries)
			}
			for i := 1; i <= 3; i++ {
				if _, err := d.store.GetEntity("alice", "note", fmt.Sprintf("n%d", i)); err != nil {
					t.Fatalf("n%d: %v", i, err)
				}
			}
		})
	}
}

// Stopping the daemon while a read ahead waits for its answer ends the
// read and its goroutine (TestMain checks for leaks), and the cursor
// stays that of the last page applied.
func TestPullStopDuringReadAhead(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hits := make(chan string, 16)
	d, _, _ := startPuller(t, PullOn, func(_, q string) (int, string) {
		after := afterOf(q)
		hits <- after
		if after == "1" {
			<-release
		}
		return 200, aheadPage(after)
	})
	defer close(release)
	waitHit(t, hits, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d.Stop(ctx)
	if ctx.Err() != nil {
		t.Fatal("Stop waited for the read ahead's answer")
	}
	st, err := d.store.LoadPullState("alice")
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor != "1" && st.Cursor != "" {
		t.Fatalf("cursor %q after a stop during the read of page 2", st.Cursor)
	}
}
