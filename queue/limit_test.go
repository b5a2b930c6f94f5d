package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Past MaxQueueBytes an app's create or update is ErrStorageFull and
// writes nothing; a delete, a replay, sends and the sweep go on; once the
// queue drains and is swept, writes work again.
func TestMaxQueueBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit = 512 << 10
	s, _ := setup(t, Config{NoSync: true, MaxQueueBytes: limit, DoneRetention: time.Hour})
	data := json.RawMessage(`{"text":"` + strings.Repeat("x", 2000) + `"}`)
	var last Write
	n := 0
	for ; ; n++ {
		w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%04d", n), OperationID: fmt.Sprintf("op%04d", n), Data: data}
		_, err := s.Apply(ctx, w)
		if errors.Is(err, ErrStorageFull) {
			if !strings.Contains(err.Error(), "maxQueueBytes") {
				t.Fatalf("the refusal does not name the limit: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n > 1000 {
			t.Fatal("the limit never refused a write")
		}
		last = w
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !st.QueueFull || st.QueuedBytes < limit || st.MaxQueueBytes != limit || st.Counts[StatePending] != n {
		t.Fatalf("stats at the limit: full=%v queued=%d max=%d pending=%d (want %d)", st.QueueFull, st.QueuedBytes, st.MaxQueueBytes, st.Counts[StatePending], n)
	}
	if _, err := s.Apply(ctx, Write{Op: OpUpdate, AccountID: "acct", EntityType: "note", EntityID: "e0000", Data: json.RawMessage(`{"a":1}`)}); !errors.Is(err, ErrStorageFull) {
		t.Fatalf("update at the limit: %v", err)
	}
	if r, err := s.Apply(ctx, last); err != nil || !r.Replayed {
		t.Fatalf("replay at the limit: %v (replayed %v)", err, r.Replayed)
	}
	if _, err := s.Apply(ctx, Write{Op: OpDelete, AccountID: "acct", EntityType: "note", EntityID: "e0001"}); err != nil {
		t.Fatalf("delete at the limit: %v", err)
	}

	for {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if errors.Is(err, ErrNoReady) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "s-" + op.EntityID}); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := s.Stats(); st.QueuedBytes != 0 || st.QueueFull {
		t.Fatalf("after the drain: queued %d, full %v", st.QueuedBytes, st.QueueFull)
	}
	if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "after", Data: data}); err != nil {
		st, _ := s.Stats()
		t.Fatalf("write after the queue drained: %v (queued %d)", err, st.QueuedBytes)
	}
}
