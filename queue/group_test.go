package queue

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// Tests of the ways an ordered group leaked (issue 26): each failed
// before every member waited for every earlier one.

// ordered applies an ordered batch of account acct and returns its
// operations' ids.
func ordered(t *testing.T, s *Store, ws ...Write) []string {
	t.Helper()
	for i := range ws {
		ws[i].AccountID = "acct"
		if ws[i].EntityType == "" {
			ws[i].EntityType = "note"
		}
	}
	res, err := s.ApplyBatch(context.Background(), ws, true)
	if err != nil {
		t.Fatalf("ApplyBatch: %v", err)
	}
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Operation.ID
	}
	return ids
}

func w(op OpType, id, data string) Write {
	wr := Write{Op: op, EntityID: id}
	if data != "" {
		wr.Data = json.RawMessage(data)
	}
	return wr
}

// claimOnly claims the next ready operation and wants it to be id ("":
// nothing ready).
func claimOnly(t *testing.T, s *Store, id string) Operation {
	t.Helper()
	op, err := s.Claim(context.Background(), "acct", "w", time.Minute)
	if id == "" {
		if !errors.Is(err, ErrNoReady) {
			t.Fatalf("claimed %s (%s %s), want nothing ready", op.ID, op.Type, op.EntityID)
		}
		return op
	}
	if err != nil || op.ID != id {
		t.Fatalf("claimed %q (%s %s), %v; want %s", op.ID, op.Type, op.EntityID, err, id)
	}
	return op
}

func decline(t *testing.T, s *Store, op Operation) {
	t.Helper()
	if err := s.Decline(context.Background(), op.ID, "w", "validation", "no"); err != nil {
		t.Fatal(err)
	}
}

func done(t *testing.T, s *Store, op Operation, serverID string) {
	t.Helper()
	if _, err := s.Complete(context.Background(), op.ID, "w", Completion{ServerID: serverID, ServerVersion: 1}); err != nil {
		t.Fatal(err)
	}
}

func blockedBy(t *testing.T, s *Store, id string) string {
	t.Helper()
	op, err := s.GetOperation(id)
	if err != nil {
		t.Fatal(err)
	}
	if op.Blocked != (op.BlockedBy != "") {
		t.Fatalf("%s: blocked %v, blockedBy %q", id, op.Blocked, op.BlockedBy)
	}
	return op.BlockedBy
}

// Case 1: an ordered delete of an entity whose create the server refused
// is done at once (nothing to send); the member after it still waits for
// the failed member before it.
func TestGroupDoneAtOnceDeleteKeepsTheHold(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	decline(t, s, claimOnly(t, s, mustHead(t, s, "x")))
	ids := ordered(t, s, w(OpCreate, "p", `{}`), w(OpDelete, "x", ""), w(OpCreate, "z", `{}`))
	if op, _ := s.GetOperation(ids[1]); op.State != StateDone {
		t.Fatalf("the delete over a refused create: %s", op.State)
	}
	decline(t, s, claimOnly(t, s, ids[0]))
	claimOnly(t, s, "") // z waits for p, failed
	if got := blockedBy(t, s, ids[2]); got != ids[0] {
		t.Fatalf("z blocked by %q, want p's %s", got, ids[0])
	}
	if e, _ := entity(t, s, "z"); !e.Blocked || e.BlockedBy != ids[0] {
		t.Fatalf("entity z: %+v", e)
	}
	if _, err := s.Retry(context.Background(), ids[0]); err != nil {
		t.Fatal(err)
	}
	done(t, s, claimOnly(t, s, ids[0]), "srv-p")
	claimOnly(t, s, ids[2])
	if got := blockedBy(t, s, ids[2]); got != "" {
		t.Fatalf("z released, blocked by %q", got)
	}
}

// Case 1, variant: an update of a synced entity refused, then a delete
// of it: the delete takes the failed member's place, and the member
// after it waits for the delete.
func TestGroupDeleteOverFailedMemberTakesItsPlace(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	done(t, s, claimOnly(t, s, mustHead(t, s, "x")), "srv-x")
	ids := ordered(t, s, w(OpUpdate, "x", `{"v":1}`), w(OpCreate, "y", `{}`))
	decline(t, s, claimOnly(t, s, ids[0]))
	del := mustApply(t, s, Write{Op: OpDelete, EntityID: "x"}).Operation.ID
	if got := blockedBy(t, s, ids[1]); got != del {
		t.Fatalf("y blocked by %q, want the delete %s", got, del)
	}
	done(t, s, claimOnly(t, s, del), "srv-x")
	claimOnly(t, s, ids[1])
}

// Case 2: a replayed write inside an ordered batch (its key used and
// done) is no member: the member after it waits for the one before it.
func TestGroupReplayedWriteIsNoMember(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	a := mustApply(t, s, Write{Op: OpCreate, EntityID: "a", Data: json.RawMessage(`{}`), OperationID: "key-a"}).Operation
	done(t, s, claimOnly(t, s, a.ID), "srv-a")
	replay := w(OpCreate, "a", `{}`)
	replay.OperationID = "key-a"
	ids := ordered(t, s, w(OpCreate, "b", `{}`), replay, w(OpCreate, "c", `{}`))
	if ids[1] != a.ID {
		t.Fatalf("the replay answered %s, want %s", ids[1], a.ID)
	}
	decline(t, s, claimOnly(t, s, ids[0]))
	claimOnly(t, s, "") // c waits for b
	if got := blockedBy(t, s, ids[2]); got != ids[0] {
		t.Fatalf("c blocked by %q, want b's %s", got, ids[0])
	}
}

// Case 3: an ordered update of an entity whose create was refused does
// not renew the create and send it ahead of the group's earlier members.
func TestGroupUpdateDoesNotRenewAhead(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	xc := claimOnly(t, s, mustHead(t, s, "x"))
	decline(t, s, xc)
	ids := ordered(t, s, w(OpCreate, "p", `{}`), w(OpUpdate, "x", `{"fixed":true}`))
	if op, _ := s.GetOperation(xc.ID); op.State != StatePermanentFailed {
		t.Fatalf("x's refused create: %s", op.State)
	}
	claimOnly(t, s, ids[0]) // only p is ready
	claimOnly(t, s, "")
}

// Case 4: resolve take local on a conflicted member: the new operation
// takes its place; the member after it waits for it.
func TestGroupResolveTakeLocalTakesThePlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	done(t, s, claimOnly(t, s, mustHead(t, s, "x")), "srv-x")
	ids := ordered(t, s, w(OpUpdate, "x", `{"v":"mine"}`), w(OpCreate, "y", `{}`))
	m0 := claimOnly(t, s, ids[0])
	if err := s.Conflict(ctx, m0.ID, "w", CodeVersionConflict, "newer", ServerState{Version: 2, Data: json.RawMessage(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	e, _, err := s.Resolve(ctx, "acct", "note", "x", TakeLocal, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := blockedBy(t, s, ids[1]); got != e.LastOperationID {
		t.Fatalf("y blocked by %q, want the resolution %s", got, e.LastOperationID)
	}
	n := claimOnly(t, s, e.LastOperationID)
	claimOnly(t, s, "") // y waits for the resolution in flight
	done(t, s, n, "srv-x")
	claimOnly(t, s, ids[1])
}

// A discard is the user's decision: the member after a discarded one
// goes, once nothing earlier waits; a discard in the middle of a held
// group hands the hold on.
func TestGroupDiscardReleasesOnlyWhatNothingEarlierHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	ids := ordered(t, s, w(OpCreate, "a", `{}`), w(OpCreate, "b", `{}`), w(OpCreate, "c", `{}`))
	decline(t, s, claimOnly(t, s, ids[0]))
	if err := s.Discard(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	b := claimOnly(t, s, ids[1])
	decline(t, s, b)
	claimOnly(t, s, "")
	if got := blockedBy(t, s, ids[2]); got != ids[1] {
		t.Fatalf("c blocked by %q, want b's %s", got, ids[1])
	}
	if err := s.Discard(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	claimOnly(t, s, ids[2])
}

// mustHead returns the id of the head operation of note/id.
func mustHead(t *testing.T, s *Store, id string) string {
	t.Helper()
	e, err := s.EntityRow("acct", "note", id)
	if err != nil {
		t.Fatal(err)
	}
	return e.LastOperationID
}

// A create over a refused delete with writes queued behind it (made
// again and deleted again) drops them all and is the partition's head:
// a member that waited for the refused delete waits for it, and nothing
// it waits for waits for that member (a cycle the property test found).
func TestGroupCreateOverRefusedDeleteWithWritesBehind(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	done(t, s, claimOnly(t, s, mustHead(t, s, "x")), "srv-x")
	ids := ordered(t, s, w(OpDelete, "x", ""), w(OpCreate, "y", `{}`))
	create(t, s, "x", `{"again":1}`) // queued behind the delete, not yet refused
	mustApply(t, s, Write{Op: OpDelete, EntityID: "x"})
	decline(t, s, claimOnly(t, s, ids[0]))
	c := create(t, s, "x", `{"again":2}`).Operation
	if c.Type != OpUpdate {
		t.Fatalf("the create over the refused delete is a %s", c.Type)
	}
	if got := blockedBy(t, s, ids[1]); got != c.ID {
		t.Fatalf("y blocked by %q, want the create %s", got, c.ID)
	}
	done(t, s, claimOnly(t, s, c.ID), "srv-x")
	claimOnly(t, s, ids[1])
	if e, _ := entity(t, s, "x"); string(e.Data) != `{"again":2}` {
		t.Fatalf("x %+v", e)
	}
}

// An ordered batch's update of an entity in conflict does not renew the
// refused head, so it is no resolution either: the entity stays in
// conflict, resolvable, with the server's record beside it (the checker
// met such entities failed with version_conflict, which resolve refused
// as no_conflict).
func TestGroupUpdateOfConflictedEntityKeepsTheConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	create(t, s, "x", `{}`)
	done(t, s, claimOnly(t, s, mustHead(t, s, "x")), "srv-x")
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "x", Data: json.RawMessage(`{"v":"mine"}`)})
	op := claimOnly(t, s, mustHead(t, s, "x"))
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "newer", ServerState{Version: 2, Data: json.RawMessage(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	ordered(t, s, w(OpCreate, "p", `{}`), w(OpUpdate, "x", `{"v":"again"}`))
	e, _ := entity(t, s, "x")
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Version != 2 {
		t.Fatalf("%+v server %+v", e, e.Server)
	}
	e, _, err := s.Resolve(ctx, "acct", "note", "x", TakeLocal, "")
	if err != nil || e.ServerVersion != 2 || string(e.Data) != `{"v":"again"}` {
		t.Fatalf("take local: %+v %v", e, err)
	}
}
