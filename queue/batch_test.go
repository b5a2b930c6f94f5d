package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
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
	_, err := s.ApplyBatch(ctx, batch(true))
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
	if _, err := s.ApplyBatch(ctx, ws); !errors.As(err, &be) || be.Index != 37 || !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("batch with a missing entity: %v", err)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 0 {
		t.Fatalf("a refused batch wrote: %v", st.Counts)
	}
	res, err := s.ApplyBatch(ctx, batch(false))
	if err != nil || len(res) != 51 {
		t.Fatalf("batch: %d results, %v", len(res), err)
	}
	if e, _ := s.GetEntity("acct", "note", "n01"); string(e.Data) != `{"i":1,"j":1}` || e.Version != 2 {
		t.Fatalf("n01 after create and update in one batch: %+v", e)
	}
	// The same keys again: replays, nothing new.
	again, err := s.ApplyBatch(ctx, batch(false)[:50])
	if err != nil || !again[10].Replayed || again[10].Operation.ID != res[10].Operation.ID {
		t.Fatalf("replay: %+v %v", again[10], err)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 51 {
		t.Fatalf("counts %v, want 51 pending", st.Counts)
	}
	if _, err := s.ApplyBatch(ctx, nil); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("empty batch: %v", err)
	}
	if _, err := s.ApplyBatch(ctx, make([]Write, MaxBatchWrites+1)); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("too many writes: %v", err)
	}
}
