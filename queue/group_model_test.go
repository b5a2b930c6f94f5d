package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestOrderedGroupsMatchModel is the test of record of ordered groups
// (issue 26): random ordered and single writes over a few entities, the
// server's answers (done, refused, conflict), the user's retries,
// discards and resolves, and replayed writes, checked against a model
// that knows only the rule: an operation is sent only when every earlier
// member of its group is done, or was dropped by the user (a discard, a
// resolve that takes the server's record). A member replaced by a new
// operation of its entity (a delete over a refused head, a create over a
// refused delete, a resolve that keeps the local data) is that new
// operation in the model. At the end everything is retried and answered:
// nothing may stay held.
func TestOrderedGroupsMatchModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s, _ := setup(t, Config{NoSync: true})
		entities := []string{"e0", "e1", "e2", "e3"}

		type slot struct {
			group, index int
			op           string
			cleared      bool // dropped by the user
		}
		var (
			slots    []*slot
			groups   int
			entityOf = map[string]string{} // operation id → entity id
			past     []Write               // writes made, for replays
			keys     int
			sending  []Operation
		)
		state := func(id string) (State, bool) {
			op, err := s.GetOperation(id)
			if errors.Is(err, ErrOperationNotFound) {
				return "", false
			}
			if err != nil {
				rt.Fatal(err)
			}
			return op.State, true
		}
		unfinished := func(id string) []Operation {
			all, _, err := s.ListOperations(ListOptions{Limit: MaxListLimit})
			if err != nil {
				rt.Fatal(err)
			}
			var out []Operation
			for _, op := range all {
				if op.EntityID == id && op.State != StateDone {
					out = append(out, op)
				}
			}
			return out
		}
		live := func(id string) bool {
			e, err := s.EntityRow("acct", "note", id)
			return err == nil && !e.Deleted
		}
		// rebind: a member whose operation is gone was replaced (the new
		// operation of its entity took the place of the partition's head)
		// or dropped (by the user, or with the head it queued behind).
		rebind := func(replacer map[string]string) {
			for _, sl := range slots {
				if sl.cleared {
					continue
				}
				if _, ok := state(sl.op); ok {
					continue
				}
				if r := replacer[sl.op]; r != "" {
					sl.op = r
				} else {
					sl.cleared = true
				}
			}
		}
		// The rule, checked at every claim.
		check := func(op Operation) {
			for _, sl := range slots {
				if sl.op != op.ID {
					continue
				}
				for _, before := range slots {
					if before.group != sl.group || before.index >= sl.index || before.cleared {
						continue
					}
					if st, _ := state(before.op); st != StateDone {
						rt.Fatalf("%s (%s %s, member %d of group %d) sent while member %d (%s, %s) is %s",
							op.ID, op.Type, op.EntityID, sl.index, sl.group, before.index, before.op, entityOf[before.op], st)
					}
				}
			}
		}
		write := func(ordered bool) {
			n := 1
			if ordered {
				n = rapid.IntRange(1, 4).Draw(rt, "members")
			}
			picked := rapid.SliceOfNDistinct(rapid.SampledFrom(entities), n, n, rapid.ID[string]).Draw(rt, "entities")
			var ws []Write
			replacer := map[string]string{}
			replaces := map[int]string{} // write → the head it replaces
			members := 0                 // new writes so far
			for _, id := range picked {
				var wr Write
				if len(past) > 0 && rapid.IntRange(0, 5).Draw(rt, "replay?") == 0 {
					wr = rapid.SampledFrom(past).Draw(rt, "replay")
					if _, ok := state(wr.OperationID); !ok || slices.ContainsFunc(ws, func(x Write) bool { return x.EntityID == wr.EntityID }) {
						continue // its operation is gone: the key would make a new write
					}
				} else {
					keys++
					wr = Write{AccountID: "acct", EntityType: "note", EntityID: id,
						OperationID: fmt.Sprintf("k%d", keys), RequestFingerprint: fmt.Sprintf("f%d", keys)}
					if live(id) {
						wr.Op = rapid.SampledFrom([]OpType{OpUpdate, OpDelete}).Draw(rt, "op")
					} else {
						wr.Op = OpCreate
					}
					if wr.Op != OpDelete {
						wr.Data = json.RawMessage(fmt.Sprintf(`{"k":%d}`, keys))
					}
					// A write that drops a refused head takes its place,
					// unless it has a place of its own: a member of an
					// ordered batch after its first.
					if u := unfinished(id); len(u) > 0 && u[0].State == StatePermanentFailed && u[0].Declined &&
						(wr.Op == OpDelete || wr.Op == OpCreate && u[0].Type == OpDelete) && !(ordered && members > 0) {
						replaces[len(ws)] = u[0].ID
					}
					members++
				}
				ws = append(ws, wr)
			}
			if len(ws) == 0 {
				return
			}
			res, err := s.ApplyBatch(ctx, slices.Clone(ws), ordered)
			if err != nil {
				rt.Fatalf("batch %+v: %v", ws, err)
			}
			groups++
			index := 0
			for i, r := range res {
				entityOf[r.Operation.ID] = r.Operation.EntityID
				if r.Replayed {
					continue
				}
				past = append(past, ws[i])
				if h := replaces[i]; h != "" {
					replacer[h] = r.Operation.ID
				}
				if ordered {
					slots = append(slots, &slot{group: groups, index: index, op: r.Operation.ID})
					index++
				}
			}
			rebind(replacer)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"ordered": func(rt *rapid.T) { write(true) },
			"single":  func(rt *rapid.T) { write(false) },
			"claim": func(rt *rapid.T) {
				op, err := s.Claim(ctx, "acct", "w", time.Hour)
				if errors.Is(err, ErrNoReady) {
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				check(op)
				sending = append(sending, op)
			},
			"answer": func(rt *rapid.T) {
				if len(sending) == 0 {
					rt.Skip("nothing sent")
				}
				i := rapid.IntRange(0, len(sending)-1).Draw(rt, "sent")
				op := sending[i]
				sending = slices.Delete(sending, i, i+1)
				var err error
				switch rapid.IntRange(0, 3).Draw(rt, "answer") {
				case 0, 1:
					_, err = s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID, ServerVersion: 1})
				case 2:
					err = s.Decline(ctx, op.ID, "w", "validation", "refused")
				case 3:
					if op.Type == OpCreate {
						err = s.Decline(ctx, op.ID, "w", "validation", "refused")
					} else {
						err = s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "newer", ServerState{Version: 9, Data: json.RawMessage(`{"theirs":1}`)})
					}
				}
				if err != nil {
					rt.Fatal(err)
				}
			},
			"retry": func(rt *rapid.T) {
				failed, _, _ := s.ListOperations(ListOptions{State: StatePermanentFailed})
				if len(failed) == 0 {
					rt.Skip("nothing failed")
				}
				if _, err := s.Retry(ctx, rapid.SampledFrom(failed).Draw(rt, "failed").ID); err != nil {
					rt.Fatal(err)
				}
			},
			"discard": func(rt *rapid.T) {
				failed, _, _ := s.ListOperations(ListOptions{State: StatePermanentFailed})
				if len(failed) == 0 {
					rt.Skip("nothing failed")
				}
				if err := s.Discard(ctx, rapid.SampledFrom(failed).Draw(rt, "failed").ID); err != nil {
					rt.Fatal(err)
				}
				rebind(nil)
			},
			"resolve": func(rt *rapid.T) {
				var inConflict []string
				for _, id := range entities {
					if e, err := s.EntityRow("acct", "note", id); err == nil && e.SyncState == SyncConflict {
						inConflict = append(inConflict, id)
					}
				}
				if len(inConflict) == 0 {
					rt.Skip("no conflict")
				}
				id := rapid.SampledFrom(inConflict).Draw(rt, "entity")
				take := rapid.SampledFrom([]string{TakeServer, TakeLocal}).Draw(rt, "take")
				head := unfinished(id)[0].ID
				e, _, err := s.Resolve(ctx, "acct", "note", id, take, "")
				if err != nil {
					rt.Fatal(err)
				}
				replacer := map[string]string{}
				if take == TakeLocal {
					if _, ok := state(e.LastOperationID); ok {
						replacer[head] = e.LastOperationID
						entityOf[e.LastOperationID] = id
					}
				}
				rebind(replacer)
			},
			"": func(rt *rapid.T) {
				if err := s.Check(); err != nil {
					rt.Fatal(err)
				}
			},
		})

		// Everything answered done, retried and answered again: nothing
		// stays held.
		for _, op := range sending {
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID, ServerVersion: 1}); err != nil {
				rt.Fatal(err)
			}
		}
		for range 1000 {
			failed, _, _ := s.ListOperations(ListOptions{State: StatePermanentFailed})
			for _, f := range failed {
				if _, err := s.Retry(ctx, f.ID); err != nil {
					rt.Fatal(err)
				}
			}
			op, err := s.Claim(ctx, "acct", "w", time.Hour)
			if errors.Is(err, ErrNoReady) {
				break
			}
			if err != nil {
				rt.Fatal(err)
			}
			check(op)
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID, ServerVersion: 1}); err != nil {
				rt.Fatal(err)
			}
		}
		if left, _, _ := s.ListOperations(ListOptions{State: StatePending}); len(left) > 0 {
			all, _, _ := s.ListOperations(ListOptions{Limit: MaxListLimit})
			for _, o := range all {
				rt.Logf("left: %s %s %s %s after=%q blockedBy=%q", o.ID, o.Type, o.EntityID, o.State, o.After, o.BlockedBy)
			}
			op, _ := s.GetOperation(left[0].ID)
			rt.Fatalf("%d operations left held, %s (%s %s) blocked by %q", len(left), op.ID, op.Type, op.EntityID, op.BlockedBy)
		}
		if err := s.Check(); err != nil {
			rt.Fatal(err)
		}
	})
}
