package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A partition with thousands of unfinished operations lists them all in
// one entity row: the row grows with them, each write rewrites it. The
// store must stay consistent (Check), survive a reopen, and the cost of a
// write must not blow up; the row size is logged.
func TestSchema6AttackHugePartition(t *testing.T) {
	path := filepath.Join(t.TempDir(), "syncd.db")
	clock := newClock()
	s, err := Open(path, Config{NoSync: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, "hot", `{"n":0}`)
	const n = 3000
	var first, last time.Duration
	for i := 1; i <= n; i++ {
		start := time.Now()
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "hot", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
		d := time.Since(start)
		if i <= 100 {
			first += d
		}
		if i > n-100 {
			last += d
		}
	}
	t.Logf("first 100 writes %v, last 100 writes %v (%d unfinished ops in one partition)", first, last, n+1)
	mustCheck(t, s)
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var row int
	s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEntities).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			row = max(row, len(v))
		}
		return nil
	})
	t.Logf("counts %v; largest entity row %d bytes", st.Counts, row)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Config{NoSync: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCheck(t, s)
	// Re-create the same id while its ops are unfinished.
	mustApply(t, s, Write{Op: OpDelete, EntityID: "hot"})
	create(t, s, "hot", `{"again":1}`)
	mustApply(t, s, Write{Op: OpDelete, EntityID: "hot"})
	create(t, s, "hot", `{"again":2}`)
	mustCheck(t, s)
	e, err := s.GetEntity("acct", "note", "hot")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Data) != `{"again":2}` {
		t.Fatalf("re-created entity reads %s", e.Data)
	}
	if _, _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
}

// An upgrade of a schema-5 file whose entity rows are gone (while its
// partitions index lists unfinished ops) must refuse and leave the file
// exactly as it was, every time it is tried.
func TestSchema6AttackUpgradeRefusesMissingEntity(t *testing.T) {
	path, want := openFixture(t, "schema5")
	if len(want.Pending) == 0 {
		t.Skip("fixture has no unfinished ops")
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketPartitionsV5) == nil {
			return fmt.Errorf("fixture has no partitions tree")
		}
		return tx.DeleteBucket(bucketEntities)
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s, err := Open(path, Config{NoSync: true})
		if err == nil {
			s.Close()
			t.Fatal("a schema-5 file with unfinished ops and no entity rows was upgraded")
		}
		after, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !bytes.Equal(before, after) {
			t.Fatalf("the refused upgrade changed the file (%v)", err)
		}
		t.Logf("refused: %v", err)
	}
}

// Readers of the change log while writes land and the sweep cuts groups:
// every answer is a run of consecutive seqs that starts right after since
// whenever since is not older than the oldest kept event.
func TestSchema6AttackReadersDuringSweep(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true, EventHistory: 25})
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 2 {
		go func() {
			var since uint64
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				got, oldest, err := s.Events(since, 0)
				if err != nil {
					errs <- err
					return
				}
				for i, e := range got {
					if e.Seq <= since || i > 0 && e.Seq != got[i-1].Seq+1 {
						errs <- fmt.Errorf("reader %d: Events(%d): seq %d at %d", r, since, e.Seq, i)
						return
					}
				}
				if len(got) > 0 && oldest <= since+1 && got[0].Seq != since+1 {
					errs <- fmt.Errorf("reader %d: Events(%d) oldest %d starts at %d", r, since, oldest, got[0].Seq)
					return
				}
				if len(got) > 0 {
					since = got[len(got)/2].Seq // land mid-group next time
				}
			}
		}()
	}
	for i := range 60 {
		ws := make([]Write, 1+i%9)
		for j := range ws {
			ws[j] = Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%d-%d", i, j), Data: json.RawMessage(`{"a":1}`)}
		}
		if _, err := s.ApplyBatch(ctx, ws, false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, oldest, err := s.Events(0, 1); err != nil || oldest <= 1 {
		t.Fatalf("the sweep cut nothing: oldest %d (%v)", oldest, err)
	}
}
