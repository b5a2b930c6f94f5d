package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// commitCounter opens a store whose OnCommit counts commits.
func commitCounter(t *testing.T, cfg Config) (*Store, *atomic.Int64) {
	t.Helper()
	var commits atomic.Int64
	cfg.NoSync = true
	cfg.OnCommit = func([]Event) { commits.Add(1) }
	s, _ := setup(t, cfg)
	return s, &commits
}

// applyAsync applies a create of entity id in the background; the
// returned channel gets its error.
func applyAsync(ctx context.Context, s *Store, id string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: id, Data: json.RawMessage(`{}`)})
		done <- err
	}()
	return done
}

// waitLeading returns once a writer leads a transaction and has taken
// every queued write into its batch, or once first has answered (which
// fails the test).
func waitLeading(t *testing.T, s *Store, first <-chan error) {
	t.Helper()
	for {
		select {
		case err := <-first:
			t.Fatalf("the first write answered (%v) before a second arrived", err)
		default:
		}
		s.mu.Lock()
		taken := s.leading && len(s.pending) == 0
		s.mu.Unlock()
		if taken {
			return
		}
		runtime.Gosched()
	}
}

// watchdog fails the test if done does not answer within a minute (the
// waits under test are an hour long).
func watchdog(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: still waiting after a minute", what)
	}
}

// A deferrable write that leads waits for the next one, and both share a
// commit, even though the first arrived alone.
func TestDeferrableWritesShareACommit(t *testing.T) {
	s, commits := commitCounter(t, Config{DeferWait: time.Hour, MaxBatch: 2})
	ctx := Deferrable(context.Background())
	first := applyAsync(ctx, s, "a")
	waitLeading(t, s, first)
	second := applyAsync(ctx, s, "b")
	watchdog(t, first, "first write") // the batch is full at two
	watchdog(t, second, "second write")
	if n := commits.Load(); n != 1 {
		t.Fatalf("%d commits, want 1 shared by both writes", n)
	}
}

// A write that is not deferrable (an app's) ends the wait at once.
func TestNonDeferrableWriteEndsTheWait(t *testing.T) {
	s, commits := commitCounter(t, Config{DeferWait: time.Hour})
	first := applyAsync(Deferrable(context.Background()), s, "a")
	waitLeading(t, s, first)
	app := applyAsync(context.Background(), s, "b")
	watchdog(t, app, "app write")
	watchdog(t, first, "deferrable write")
	if n := commits.Load(); n != 1 {
		t.Fatalf("%d commits, want 1 shared by both writes", n)
	}
}

// Without DeferWait, or with writes that are not deferrable, each lone
// write commits at once.
func TestWritesCommitAtOnceWithoutDeferral(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration
		ctx  context.Context
	}{
		{"deferral off", -1, Deferrable(context.Background())},
		{"not deferrable", time.Hour, context.Background()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, commits := commitCounter(t, Config{DeferWait: tc.wait})
			for i := range 3 {
				watchdog(t, applyAsync(tc.ctx, s, fmt.Sprint(i)), "write")
			}
			if n := commits.Load(); n != 3 {
				t.Fatalf("%d commits, want 3", n)
			}
		})
	}
}

// Writes that were waited for do not count as writers that arrive
// together: the next lone write does not wait BatchWait for their like.
func TestDeferredBatchDoesNotMakeTheNextWriteWait(t *testing.T) {
	s, commits := commitCounter(t, Config{DeferWait: time.Hour, BatchWait: time.Hour, MaxBatch: 2})
	ctx := Deferrable(context.Background())
	first := applyAsync(ctx, s, "a")
	waitLeading(t, s, first)
	second := applyAsync(ctx, s, "b")
	watchdog(t, first, "first write")
	watchdog(t, second, "second write")
	watchdog(t, applyAsync(context.Background(), s, "c"), "lone app write")
	if n := commits.Load(); n != 2 {
		t.Fatalf("%d commits, want 2", n)
	}
}

// A write that panics while its goroutine leads the commit, before or
// after writing, gets an error; the transaction rolls back without it,
// the writes sharing it commit, and later writes, claims and Close work.
// So does a panic in OnCommit, after the commit.
func TestCommitPanicHoldsNothing(t *testing.T) {
	ctx := context.Background()
	var panicOnCommit atomic.Bool
	s, _ := setup(t, Config{NoSync: true, OnCommit: func([]Event) {
		if panicOnCommit.Load() {
			panic("OnCommit panics")
		}
	}})
	for _, wrote := range []bool{false, true} {
		err := s.update(ctx, func(w *txw) error {
			if wrote {
				if err := w.put(w.b(bucketMeta), []byte("half-written"), []byte("x")); err != nil {
					return err
				}
			}
			panic("a write panics")
		})
		if err == nil || !strings.Contains(err.Error(), "a write panics") {
			t.Fatalf("wrote=%v: the panicking write answered %v", wrote, err)
		}
	}
	panicOnCommit.Store(true)
	if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "during", Data: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("a write whose OnCommit panicked answered no error")
	}
	panicOnCommit.Store(false)

	done := make(chan error, 1)
	go func() {
		_, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "after", Data: json.RawMessage(`{}`)})
		done <- err
	}()
	watchdog(t, done, "a write after the panics")
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil {
		t.Fatalf("claim after the panics: %v", err)
	}
	var half []byte
	s.db.View(func(tx *bolt.Tx) error {
		half = tx.Bucket(bucketMeta).Get([]byte("half-written"))
		return nil
	})
	if half != nil {
		t.Fatal("the write that panicked after writing was committed")
	}
}
