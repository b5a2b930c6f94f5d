package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestApplyBatchAllOrNone: a bad write at index 37 of 51 writes nothing;
// the same batch fixed writes all 51, in order, in one commit; per-write
// keys replay.
func TestApplyBatchAllOrNone(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()
	batch := func(bad bool) []Write {
		var ws []Write
		for i := range 50 {
			ws = append(ws, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("n%02d", i),
				Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), OperationID: fmt.Sprintf("k%02d", i), RequestFingerprint: fmt.Sprintf("f%02d", i)})
		}
		ws = append(ws, Write{Op: OpUpdate, AccountID: "acct", EntityType: "note", EntityID: "n01", Data: json.RawMessage(`{"j":1}`)})
		if bad {
			ws[37].Data = json.RawMessage(`[1]`)
		}
		return ws
	}
	_, err := s.ApplyBatch(ctx, batch(true), false)
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 37 || !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("bad batch: %v", err)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 0 {
		t.Fatalf("a refused batch wrote: %v", st.Counts)
	}
	// A refusal found inside the transaction (an update of an entity
	// that does not exist) rolls back the writes before it too.
	ws := batch(false)
	ws[37] = Write{Op: OpUpdate, AccountID: "acct", EntityType: "note", EntityID: "nope", Data: json.RawMessage(`{}`)}
	if _, err := s.ApplyBatch(ctx, ws, false); !errors.As(err, &be) || be.Index != 37 || !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("batch with a missing entity: %v", err)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 0 {
		t.Fatalf("a refused batch wrote: %v", st.Counts)
	}
	res, err := s.ApplyBatch(ctx, batch(false), false)
	if err != nil || len(res) != 51 {
		t.Fatalf("batch: %d results, %v", len(res), err)
	}
	if e, _ := s.GetEntity("acct", "note", "n01"); string(e.Data) != `{"i":1,"j":1}` || e.Version != 2 {
		t.Fatalf("n01 after create and update in one batch: %+v", e)
	}
	// The same keys again: replays, nothing new.
	again, err := s.ApplyBatch(ctx, batch(false)[:50], false)
	if err != nil || !again[10].Replayed || again[10].Operation.ID != res[10].Operation.ID {
		t.Fatalf("replay: %+v %v", again[10], err)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 51 {
		t.Fatalf("counts %v, want 51 pending", st.Counts)
	}
	if _, err := s.ApplyBatch(ctx, nil, false); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("empty batch: %v", err)
	}
	if _, err := s.ApplyBatch(ctx, make([]Write, MaxBatchWrites+1), false); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("too many writes: %v", err)
	}
}

// TestOrderedBatch: an ordered batch's operations are claimable one at a
// time, in order, across entities; a failed member holds the rest until
// it is retried and done, or discarded.
func TestOrderedBatch(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()
	ws := []Write{
		{Op: OpCreate, AccountID: "acct", EntityType: "invoice", EntityID: "inv", Data: json.RawMessage(`{}`)},
		{Op: OpCreate, AccountID: "acct", EntityType: "line", EntityID: "l1", Data: json.RawMessage(`{"inv":"inv"}`)},
		{Op: OpCreate, AccountID: "acct", EntityType: "line", EntityID: "l2", Data: json.RawMessage(`{"inv":"inv"}`)},
	}
	res, err := s.ApplyBatch(ctx, ws, true)
	if err != nil {
		t.Fatal(err)
	}
	if res[1].Operation.After != res[0].Operation.ID || res[2].Operation.After != res[1].Operation.ID {
		t.Fatalf("chain: %q %q", res[1].Operation.After, res[2].Operation.After)
	}
	claim := func() (Operation, error) { return s.Claim(ctx, "acct", "w", time.Minute) }
	// Only the parent is ready.
	op, err := claim()
	if err != nil || op.ID != res[0].Operation.ID {
		t.Fatalf("first claim: %+v %v", op, err)
	}
	if _, err := claim(); !errors.Is(err, ErrNoReady) {
		t.Fatalf("a child was ready before its parent was done: %v", err)
	}
	// The parent fails: the children stay held.
	if err := s.Decline(ctx, op.ID, "w", "validation", "bad"); err != nil {
		t.Fatal(err)
	}
	if _, err := claim(); !errors.Is(err, ErrNoReady) {
		t.Fatalf("a child was ready while its parent failed: %v", err)
	}
	mustCheck(t, s)
	// The user retries the parent; it goes, and then l1, then l2.
	if _, err := s.Retry(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		op, err := claim()
		if err != nil || op.ID != res[i].Operation.ID {
			t.Fatalf("claim %d: %+v %v, want %s", i, op, err, res[i].Operation.ID)
		}
		if _, err := claim(); !errors.Is(err, ErrNoReady) {
			t.Fatalf("after claim %d another was ready: %v", i, err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "s"}); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, s)
	}
	// A discarded member lets the rest go.
	res, err = s.ApplyBatch(ctx, []Write{
		{Op: OpCreate, AccountID: "acct", EntityType: "invoice", EntityID: "inv2", Data: json.RawMessage(`{}`)},
		{Op: OpCreate, AccountID: "acct", EntityType: "line", EntityID: "l3", Data: json.RawMessage(`{}`)},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	op, _ = claim()
	if err := s.Decline(ctx, op.ID, "w", "validation", "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if op, err := claim(); err != nil || op.ID != res[1].Operation.ID {
		t.Fatalf("after the discard: %+v %v", op, err)
	}
}
