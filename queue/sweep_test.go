package queue

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A sweep removes the events beyond the history as they stand when it
// starts, so it ends while a writer keeps appending events (the sweep of
// a 1M-create import used to go on as long as the import did).
func TestSweepEndsWhileWritesGoOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), Config{NoSync: true, EventHistory: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writeEvents(t, s, 10*sweepChunk)
	var before uint64
	s.db.View(func(tx *bolt.Tx) error { before = tx.Bucket(bucketEvents).Sequence(); return nil })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			mustApply(t, s, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("n%d", i), Data: []byte(`{}`)})
		}
	})
	_, events, err := s.Sweep(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// The writer may have added a few before the sweep looked.
	if want := int(before) - 10; events < want {
		t.Fatalf("swept %d events, want at least the %d beyond the history before it began", events, want)
	}
	evs, oldest, err := s.Events(0, 0)
	if err != nil || oldest < before-9 || len(evs) < 10 || evs[0].Seq != oldest {
		t.Fatalf("after the sweep: oldest %d (want from %d), %d events, %v", oldest, before-9, len(evs), err)
	}
}

// A transaction that commits alone (the sweep's) is never shared: the
// batch before it stops short of it, and it goes by itself.
func TestTakeKeepsSweepAlone(t *testing.T) {
	s := &Store{cfg: Config{MaxBatch: 8}}
	w := func() *commitReq { return &commitReq{} }
	sweep := &commitReq{alone: true}
	a, b, c := w(), w(), w()
	s.pending = []*commitReq{a, b, sweep, c}
	if got := s.take(nil); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("first batch %v", got)
	}
	if got := s.take([]*commitReq{a}); len(got) != 1 {
		t.Fatalf("a batch took past the sweep: %v", got)
	}
	if got := s.take(nil); len(got) != 1 || got[0] != sweep {
		t.Fatalf("second batch %v, want the sweep alone", got)
	}
	if got := s.take([]*commitReq{sweep}); len(got) != 1 {
		t.Fatalf("the sweep's batch took more: %v", got)
	}
	if got := s.take(nil); len(got) != 1 || got[0] != c {
		t.Fatalf("third batch %v", got)
	}
}
