package queue

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/clocktest"
	bolt "go.etcd.io/bbolt"
)

// schema4Dump is what the code of commit b1e1ed7 read back from
// testdata/schema4.db.gz (testdata/schema4_gen.go.txt made both), and
// what the code of commit 5d35e1c read back from testdata/schema5.db.gz
// (testdata/schema5_gen.go.txt).
type schema4Dump struct {
	Operations []Operation
	Entities   []Entity
	Session    *Session
	Pending    []Operation
	Events     []Event
}

func openSchema4Fixture(t *testing.T) (path string, want schema4Dump) {
	return openFixture(t, "schema4")
}

// openFixture copies testdata/name.db.gz to a file of its own and reads
// testdata/name.json.
func openFixture(t *testing.T, name string) (path string, want schema4Dump) {
	t.Helper()
	js, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &want); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open("testdata/" + name + ".db.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "syncd.db")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path, want
}

// A file written by the code before the lean write path (schema 4: a key
// per operation in the unfinished index, an event per key) opens, reads
// back as that code read it (operations, the unfinished listing, the
// change log), takes new writes whose events follow the old ones, and
// drains. Its schema number goes to the current one.
func TestOpensSchema4File(t *testing.T) { testOpensFile(t, "schema4", nil) }

// A file written by the code before the change log's rows were shared
// by the events of a write (schema 5: an event a key) opens, reads back
// as that code read it, takes new writes (their events in group rows,
// after the old ones), sweeps across both forms and drains.
func TestOpensSchema5File(t *testing.T) {
	testOpensFile(t, "schema5", func(s *Store, old []Event) {
		var single, groups int
		s.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
				if v[0] == rowGroup {
					groups++
				} else {
					single++
				}
				return nil
			})
		})
		if single < len(old) || groups == 0 {
			t.Fatalf("%d rows of one event (the file had %d events), %d groups: want the old rows kept and the new write's events grouped", single, len(old), groups)
		}
		// A sweep that keeps only the last 3 events cuts across both.
		all, _, err := s.Events(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.cfg.EventHistory = 3
		if _, n, err := s.Sweep(context.Background()); err != nil || n != len(all)-3 {
			t.Fatalf("swept %d events of %d, %v; want all but 3", n, len(all), err)
		}
		left, oldest, err := s.Events(0, 0)
		if err != nil || len(left) != 3 || oldest != all[len(all)-3].Seq {
			t.Fatalf("after the sweep: %d events from %d, %v", len(left), oldest, err)
		}
		sameJSON(t, "events after the sweep", left, all[len(all)-3:])
	})
}

// testOpensFile opens the fixture testdata/name.db.gz with today's code,
// checks that it reads back as the code that wrote it read it, writes,
// calls more (if any) and drains.
func testOpensFile(t *testing.T, name string, more func(s *Store, old []Event)) {
	ctx := context.Background()
	path, want := openFixture(t, name)
	clock := clocktest.At(clocktest.Start.Add(time.Minute))
	var emitted []Event
	s, err := Open(path, Config{Now: clock.Now, NoSync: true, MergeableTypes: []string{"draft"}, OnCommit: func(ev []Event) { emitted = append(emitted, ev...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	mustCheck(t, s)
	var schema uint64
	var oldIndex bool
	s.db.View(func(tx *bolt.Tx) error {
		schema = readU64(tx.Bucket(bucketMeta).Get(metaSchema))
		oldIndex = tx.Bucket(bucketUnfinishedV4) != nil
		return nil
	})
	if schema != schemaVersion || oldIndex {
		t.Fatalf("schema %d after open (want %d), schema 4's unfinished index left: %v", schema, schemaVersion, oldIndex)
	}

	// The two sending at the stop are pending again (Open's recovery):
	// in the listing of pending ones, after the others, as seqs go.
	pending, _, err := s.ListOperations(ListOptions{Limit: MaxListLimit, State: StatePending})
	if err != nil {
		t.Fatal(err)
	}
	wantPending := map[string]bool{}
	for _, w := range want.Operations {
		if w.State == StatePending || w.State == StateSending {
			wantPending[w.ID] = true
		}
	}
	if len(pending) != len(wantPending) || len(want.Pending) == 0 {
		t.Fatalf("%d pending listed, want %d (the fixture listed %d)", len(pending), len(wantPending), len(want.Pending))
	}
	for i, op := range pending {
		if !wantPending[op.ID] || i > 0 && pending[i-1].Seq >= op.Seq {
			t.Fatalf("pending listing %d: %s (seq %d)", i, op.ID, op.Seq)
		}
	}
	for _, w := range want.Operations {
		got, err := s.GetOperation(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if w.State == StateSending {
			w.State, w.LeaseOwner, w.LeaseExpiresAt, w.MaybeApplied, w.NextAttemptAt = got.State, "", time.Time{}, true, got.NextAttemptAt
		}
		sameJSON(t, "operation "+w.ID, got, w)
	}
	for _, w := range want.Entities {
		got, err := s.EntityRow(w.AccountID, w.Type, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "entity "+w.ID, got, w)
	}

	// The change log: the old events as they were, then those of Open's
	// recovery, then a new write's, seqs going on.
	events, oldest, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Events) == 0 || oldest != want.Events[0].Seq || len(events) < len(want.Events) {
		t.Fatalf("%d events from %d, the fixture had %d from %d", len(events), oldest, len(want.Events), want.Events[0].Seq)
	}
	sameJSON(t, "old events", events[:len(want.Events)], want.Events)
	sameJSON(t, "events of the recovery", events[len(want.Events):], emitted)
	emitted = nil
	mustApply(t, s, Write{Op: OpCreate, AccountID: "alice", EntityType: "note", EntityID: "new", Data: json.RawMessage(`{"fresh":true}`)})
	last := events[len(events)-1].Seq
	after, _, err := s.Events(last, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "events of a new write", after, emitted)
	if len(after) == 0 || after[0].Seq != last+1 {
		t.Fatalf("events after %d: %+v", last, after)
	}
	if more != nil {
		more(s, want.Events)
	}

	// Drain.
	clock.Advance(2 * time.Hour) // past the retry's next attempt
	for _, account := range []string{"alice", "bob"} {
		for {
			op, err := s.Claim(ctx, account, "w", time.Minute)
			if errors.Is(err, ErrNoReady) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustCheck(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Config{Now: clock.Now, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
}
