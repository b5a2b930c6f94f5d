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

// schema2Dump is what the code of commit 676e674 read back from
// testdata/schema2.db.gz (testdata/schema2_gen.go.txt made both).
type schema2Dump struct {
	Operations []Operation
	Entities   []Entity
	Session    *Session
}

func openSchema2Fixture(t *testing.T) (path string, want schema2Dump) {
	t.Helper()
	js, err := os.ReadFile("testdata/schema2.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &want); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open("testdata/schema2.db.gz")
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

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// rowForms counts the entity and operation rows stored as JSON (schema 2)
// and in the binary form.
func rowForms(t *testing.T, s *Store) (jsonRows, binaryRows int) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketEntities, bucketOps} {
			if err := tx.Bucket(b).ForEach(func(_, v []byte) error {
				if v[0] == '{' {
					jsonRows++
				} else {
					binaryRows++
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return jsonRows, binaryRows
}

// A file written by the code before the binary rows (schema 2, every row
// JSON) opens, reads back as that code read it, takes new writes, drains,
// and keeps every operation's payload. Its schema number goes to the current
// one, which the older code refuses to open, and the counts per account,
// entity type and app are built (Check holds them to the rows).
func TestOpensSchema2File(t *testing.T) {
	ctx := context.Background()
	path, want := openSchema2Fixture(t)
	clock := clocktest.At(clocktest.Start.Add(time.Minute))
	s, err := Open(path, Config{Now: clock.Now, NoSync: true, MergeableTypes: []string{"draft"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	mustCheck(t, s)
	var schema uint64
	s.db.View(func(tx *bolt.Tx) error { schema = readU64(tx.Bucket(bucketMeta).Get(metaSchema)); return nil })
	if schema != schemaVersion {
		t.Fatalf("schema %d after open, want %d", schema, schemaVersion)
	}

	// Read back as the old code read it; the ops it left sending are
	// back to pending (Open's recovery), maybe applied.
	recovered := 0
	for _, w := range want.Operations {
		got, err := s.GetOperation(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if w.State == StateSending {
			recovered++
			if got.State != StatePending || got.LeaseOwner != "" || !got.LeaseExpiresAt.IsZero() || !got.MaybeApplied {
				t.Errorf("op %s left sending: %+v", w.ID, got)
			}
			w.State, w.LeaseOwner, w.LeaseExpiresAt, w.MaybeApplied, w.NextAttemptAt = got.State, "", time.Time{}, true, got.NextAttemptAt
		}
		sameJSON(t, "operation "+w.ID, got, w)
	}
	if recovered != 2 {
		t.Fatalf("%d ops were sending in the fixture, want 2", recovered)
	}
	for _, w := range want.Entities {
		got, err := s.EntityRow(w.AccountID, w.Type, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, "entity "+w.ID, got, w)
	}
	if sess, err := s.LoadSession(); err != nil || sess == nil || *sess != *want.Session {
		t.Fatalf("session %+v %v", sess, err)
	}
	if j, _ := rowForms(t, s); j == 0 {
		t.Fatal("no JSON rows left after open: the fixture is read, not rewritten")
	}

	// New writes next to the old rows; then drain everything.
	mustApply(t, s, Write{Op: OpUpdate, AccountID: "alice", EntityID: "e1", Data: json.RawMessage(`{"n":11}`)})
	mustApply(t, s, Write{Op: OpCreate, AccountID: "alice", EntityID: "new", Data: json.RawMessage(`{"fresh":true}`)})
	var declined string
	for _, w := range want.Operations {
		if w.Declined {
			declined = w.ID
		}
	}
	if _, err := s.Retry(ctx, declined); err != nil {
		t.Fatal(err)
	}
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
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Counts[StateDone] != sumCounts(st.Counts) {
		t.Fatalf("not drained: %v", st.Counts)
	}
	for _, w := range want.Operations {
		got, err := s.GetOperation(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		if w.ID != declined && !sameData(got.Payload, w.Payload) {
			t.Errorf("op %s: payload %s after the drain, was %s", w.ID, got.Payload, w.Payload)
		}
	}
	for _, id := range []string{"e1", "e2", "e3", "e4", "e5", "e6", "new"} {
		if e, err := s.GetEntity("alice", "note", id); err != nil || e.SyncState != SyncSynced {
			t.Errorf("entity %s after the drain: %+v %v", id, e, err)
		}
	}
	if _, err := s.EntityRow("alice", "note", "e7"); !errors.Is(err, ErrEntityNotFound) {
		t.Errorf("e7, deleted and drained: %v", err)
	}
	if j, b := rowForms(t, s); b == 0 {
		t.Errorf("after the drain %d rows are JSON and none binary: a row written is binary", j)
	}

	// Reopen.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Config{Now: clock.Now, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s)
}

// sameData reports whether two JSON payloads hold the same data, whatever
// their spacing and escapes.
func sameData(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	ca, err1 := canonicalJSON(a)
	cb, err2 := canonicalJSON(b)
	return err1 == nil && err2 == nil && string(ca) == string(cb)
}

func sumCounts(c map[State]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}
