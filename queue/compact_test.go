package queue

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
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

// A store opened while a compaction copies the file must not write into
// the file the compaction's rename orphans: its write is in the file at
// the path afterwards. The race is made deterministic with two seams: the
// compaction stops just before its rename, and the store's open is
// known to hold a descriptor of the old file before the rename goes on.
func TestCompactRacingOpenLosesNothing(t *testing.T) {
	// Not parallel: it sets package seams.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 100)
	s.Close()

	atRename, goOn := make(chan struct{}), make(chan struct{})
	compactBeforeRename = func() { close(atRename); <-goOn }
	t.Cleanup(func() { compactBeforeRename = nil; openFile = os.OpenFile })
	compacted := make(chan error, 1)
	go func() { _, _, err := Compact(path); compacted <- err }()
	<-atRename
	// From here on, the compaction opens nothing more.
	opened := make(chan struct{}, 4)
	openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		opened <- struct{}{}
		return f, err
	}
	type result struct {
		s   *Store
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := Open(path, Config{NoSync: true, LockTimeout: time.Minute})
		got <- result{s, err}
	}()
	<-opened // the store holds a descriptor of the file the rename replaces
	close(goOn)
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := r.s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "after-compaction", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	r.s.Close()

	s, err = Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetEntity("acct", "note", "after-compaction"); err != nil {
		t.Fatalf("the acknowledged write is not in the file at the path: %v", err)
	}
}

// Two compactions at once never share a temporary file, and the second
// never compacts the file the first one replaced: every row survives.
func TestCompactTwiceAtOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 100)
	s.Close()

	atRename, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	compactBeforeRename = func() { once.Do(func() { close(atRename); <-goOn }) }
	opened := make(chan struct{}, 8)
	openFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		if filepath.Base(name) == "syncd.db" {
			opened <- struct{}{}
		}
		return f, err
	}
	t.Cleanup(func() { compactBeforeRename = nil; openFile = os.OpenFile })

	first := make(chan error, 1)
	go func() { _, _, err := Compact(path); first <- err }()
	<-atRename
	<-opened // the first compaction's own open
	second := make(chan error, 1)
	go func() { _, _, err := Compact(path); second <- err }()
	<-opened // the second holds a descriptor of the file the first replaces
	close(goOn)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "x", Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if n := st.Counts[StatePending]; n != 101 {
		t.Fatalf("pending after two compactions: %d, want 101", n)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*compact*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// The temporary file of a compaction killed before its rename is removed
// by the next Open or Compact, which hold the lock every compaction holds.
func TestStaleCompactionFilesAreRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, name := range []string{".syncd.db.compact-111", ".syncd.db.compact-222"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left by a killed compaction"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keep := filepath.Join(dir, "other.compact-1")
	os.WriteFile(keep, nil, 0o600)
	s, err = Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	left, _ := filepath.Glob(filepath.Join(dir, ".syncd.db.compact-*"))
	if len(left) != 0 {
		t.Fatalf("stale compaction files left: %v", left)
	}
	os.WriteFile(filepath.Join(dir, ".syncd.db.compact-333"), nil, 0o600)
	if _, _, err := Compact(path); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".syncd.db.compact-*")); len(left) != 0 {
		t.Fatalf("after Compact: %v", left)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("another file was removed: %v", err)
	}
}
