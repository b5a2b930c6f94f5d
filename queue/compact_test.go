package queue

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// A file that grew and then emptied shrinks when compacted, and keeps
// every row and invariant.
func TestCompact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	clock := newClock()
	s, err := Open(path, Config{Now: clock.Now, NoSync: true, DoneRetention: time.Hour, EventHistory: 10})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 1500)
	for {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if errors.Is(err, ErrNoReady) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if op.Seq > 1490 {
			break // leave a few unfinished
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Hour)
	if _, _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.FreeBytes == 0 {
		t.Fatalf("no free pages after the sweep: %+v", st)
	}
	if _, _, err := Compact(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("compact of an open file: %v", err)
	}
	s.Close()

	before, after, err := Compact(path)
	if err != nil {
		t.Fatal(err)
	}
	if after >= before {
		t.Fatalf("compact did not shrink the file: %d -> %d", before, after)
	}
	t.Logf("compacted %d -> %d bytes (%d free before)", before, after, st.FreeBytes)
	s, err = Open(path, Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	st2, _ := s.Stats()
	// Reopening returns the one sending operation to pending.
	if st2.Counts[StatePending] != st.Counts[StatePending]+st.Counts[StateSending] || st2.Counts[StateDone] != st.Counts[StateDone] {
		t.Fatalf("counts changed: %v -> %v", st.Counts, st2.Counts)
	}
	if ok, _, _, err := CompactIfWorthIt(filepath.Join(t.TempDir(), "missing.db")); ok || err != nil {
		t.Fatalf("CompactIfWorthIt of a missing file: %v %v", ok, err)
	}
}
