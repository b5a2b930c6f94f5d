package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

// rowLen returns the length of the stored row of an operation and of an
// entity.
func rowLen(t *testing.T, s *Store, seq uint64, account, typ, id string) (op, entity int) {
	t.Helper()
	s.db.View(func(tx *bolt.Tx) error {
		op = len(tx.Bucket(bucketOps).Get(u64(seq)))
		entity = len(tx.Bucket(bucketEntities).Get(entityKey(account, typ, id)))
		return nil
	})
	return op, entity
}

// A create's payload is stored once, in the entity row; the operation
// reads it from there, and gets its own copy when the entity changes, so
// each operation keeps the payload it was made with.
func TestPayloadStoredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	big := `{"body":"` + strings.Repeat("x", 10<<10) + `"}`
	created := create(t, s, "e1", big).Operation
	opLen, entLen := rowLen(t, s, created.Seq, "acct", "note", "e1")
	if opLen > 300 || entLen < 10<<10 {
		t.Fatalf("create of 10 KB: operation row %d bytes, entity row %d: want the payload in the entity row only", opLen, entLen)
	}
	if got, err := s.GetOperation(created.ID); err != nil || string(got.Payload) != big {
		t.Fatalf("GetOperation: %d bytes of payload, %v", len(got.Payload), err)
	}
	ops, _, err := s.ListOperations(ListOptions{})
	if err != nil || len(ops) != 1 || string(ops[0].Payload) != big {
		t.Fatalf("ListOperations: %v %v", len(ops), err)
	}

	// Sent and done; then the entity changes: the create keeps its payload.
	claimed, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || claimed.ID != created.ID || string(claimed.Payload) != big {
		t.Fatalf("claim: %s %d bytes %v", claimed.ID, len(claimed.Payload), err)
	}
	if _, err := s.Complete(ctx, created.ID, "w", Completion{ServerID: "s1"}); err != nil {
		t.Fatal(err)
	}
	updated := mustApply(t, s, Write{Op: OpUpdate, EntityID: "e1", Data: json.RawMessage(`{"body":"short"}`)}).Operation
	if got, _ := s.GetOperation(created.ID); string(got.Payload) != big {
		t.Fatalf("the create's payload after an update: %.40s", got.Payload)
	}
	if opLen, _ := rowLen(t, s, created.Seq, "acct", "note", "e1"); opLen < 10<<10 {
		t.Fatalf("the create's row after the entity changed: %d bytes, want its own copy", opLen)
	}
	// A delete sent removes the entity row; the update keeps its payload.
	mustApply(t, s, Write{Op: OpDelete, EntityID: "e1"})
	for range 2 {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.EntityRow("acct", "note", "e1"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("entity row after its delete went: %v", err)
	}
	if got, err := s.GetOperation(updated.ID); err != nil || string(got.Payload) != `{"body":"short"}` {
		t.Fatalf("the update's payload after its entity went: %s %v", got.Payload, err)
	}
	mustCheck(t, s)
}

// Writes that keep the data the same add operations to the entity row's
// list; the list drops operations swept since, so it stays short.
func TestPayloadRefsPruned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := setup(t, Config{NoSync: true, DoneRetention: time.Hour})
	create(t, s, "e1", `{"a":1}`)
	refs := func() []uint64 {
		var r []uint64
		s.db.View(func(tx *bolt.Tx) error {
			k := entityKey("acct", "note", "e1")
			_, r, _ = peekEntity(k, tx.Bucket(bucketEntities).Get(k))
			return nil
		})
		return r
	}
	for i := range 20 {
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "e1", Data: json.RawMessage(`{}`)}) // changes nothing
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "s"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Hour)
		if _, _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(refs()); n > 5 {
			t.Fatalf("after %d writes the entity row lists %d operations", i+1, n)
		}
	}
	mustCheck(t, s)
}

// Whatever the app writes and whatever the server answers, every
// operation reads back the payload its fingerprint was made from (Check),
// also across a restart. The data varies and repeats, so payloads move in
// and out of the entity rows.
func TestPayloadRefsProperty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runs := 0
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		runs++
		path := filepath.Join(dir, fmt.Sprintf("syncd-%d.db", runs))
		clock := newClock()
		cfg := Config{Now: clock.Now, NoSync: true, DoneRetention: time.Hour, MergeableTypes: []string{"draft"}}
		s, err := Open(path, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { s.Close() }()
		types := []string{"note", "draft"}
		ids := []string{"e1", "e2"}
		var known []string // operation ids
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				w := Write{
					Op:         rapid.SampledFrom([]OpType{OpCreate, OpUpdate, OpDelete}).Draw(rt, "op"),
					AccountID:  "acct",
					EntityType: rapid.SampledFrom(types).Draw(rt, "type"),
					EntityID:   rapid.SampledFrom(ids).Draw(rt, "id"),
					Data:       json.RawMessage(fmt.Sprintf(`{"x":%d}`, rapid.IntRange(0, 2).Draw(rt, "x"))),
				}
				if r, err := s.Apply(ctx, w); err == nil {
					known = append(known, r.Operation.ID)
				}
			},
			"send": func(rt *rapid.T) {
				op, err := s.Claim(ctx, "acct", "w", time.Minute)
				if errors.Is(err, ErrNoReady) {
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				switch rapid.IntRange(0, 3).Draw(rt, "outcome") {
				case 0, 1:
					_, err = s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv", OtherData: rapid.IntRange(0, 5).Draw(rt, "other") == 0})
				case 2:
					err = s.Decline(ctx, op.ID, "w", "validation", "no")
				case 3:
					err = s.RetryAt(ctx, op.ID, "w", clock.Now(), "network", "x", true)
				}
				if err != nil {
					rt.Fatal(err)
				}
			},
			"user": func(rt *rapid.T) {
				failed, _, err := s.ListOperations(ListOptions{State: StatePermanentFailed})
				if err != nil || len(failed) == 0 {
					return
				}
				op := rapid.SampledFrom(failed).Draw(rt, "failed")
				if rapid.Bool().Draw(rt, "retry") {
					_, err = s.Retry(ctx, op.ID)
				} else {
					err = s.Discard(ctx, op.ID)
				}
				if err != nil {
					rt.Fatal(err)
				}
			},
			"sweep": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.IntRange(0, 2).Draw(rt, "hours")) * time.Hour)
				if _, _, err := s.Sweep(ctx); err != nil {
					rt.Fatal(err)
				}
			},
			"purge": func(rt *rapid.T) {
				if rapid.IntRange(0, 9).Draw(rt, "purge") == 0 {
					if _, err := s.PurgeAccount(ctx, "acct", true); err != nil {
						rt.Fatal(err)
					}
				}
			},
			"restart": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				if s, err = Open(path, cfg); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				if err := s.Check(); err != nil {
					rt.Fatal(err)
				}
				for _, id := range known {
					if _, err := s.GetOperation(id); err != nil && !errors.Is(err, ErrOperationNotFound) {
						rt.Fatal(err)
					}
				}
			},
		})
	})
}
