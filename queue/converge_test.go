package queue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Tests of the divergences of issue 25 that the store settles: each
// failed before its fix.

// pulled puts note/id on the device as the feed brings it: synced, at
// version v of server record srvID.
func pulled(t *testing.T, s *Store, id, srvID string, v int64, data string) {
	t.Helper()
	st, err := s.LoadPullState("acct")
	if err != nil {
		t.Fatal(err)
	}
	next := st.Cursor + "+"
	c := Change{EntityType: "note", EntityID: id, ServerID: srvID, Version: v}
	if data == "" {
		c.Deleted = true
	} else {
		c.Data = json.RawMessage(data)
	}
	applyPage(t, s, st.Cursor, next, false, c)
}

func claim(t *testing.T, s *Store) Operation {
	t.Helper()
	op, err := s.Claim(context.Background(), "acct", "w", time.Minute)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return op
}

// TestConflictKeepsTheNewerServerRecord (case 2): a pull lands v3 beside
// an update in flight; the server's 409 answer (replayed, or racing the
// pull) carries v2. The entity keeps v3, and resolving takes v3.
func TestConflictKeepsTheNewerServerRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, replayed := range []bool{true, false} {
		s, _ := setup(t, Config{})
		pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
		op := claim(t, s)
		pulled(t, s, "n", "srv-n", 3, `{"v":3}`)
		if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "newer", ServerState{Version: 2, Data: json.RawMessage(`{"v":2}`)}); err != nil {
			t.Fatal(err)
		}
		e, _ := entity(t, s, "n")
		if e.SyncState != SyncConflict || e.Server == nil || e.Server.Version != 3 || string(e.Server.Data) != `{"v":3}` {
			t.Fatalf("replayed=%v: %+v server %+v", replayed, e, e.Server)
		}
		e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, "")
		if err != nil || e.ServerVersion != 3 || string(e.Data) != `{"v":3}` || e.SyncState != SyncSynced {
			t.Fatalf("take server: %+v %v", e, err)
		}
	}
}

// TestGoneAnswerKeepsWhatThePullKept (case 2, deletes): a 410 or 404 on
// an update says the record is deleted but not at which version, so it
// cannot be placed among the versions a pull kept beside the entity: the
// pulled record stays, fresh answer or replayed, and the feed's
// tombstone, when it comes, is taken.
func TestGoneAnswerKeepsWhatThePullKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	op := claim(t, s)
	pulled(t, s, "n", "srv-n", 3, `{"v":3}`)
	if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Deleted || e.Server.Version != 3 {
		t.Fatalf("after the 410: %+v server %+v", e, e.Server)
	}
	pulled(t, s, "n", "srv-n", 4, "")
	if _, removed, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, ""); err != nil || !removed {
		t.Fatalf("take server after the tombstone: %v %v", removed, err)
	}
	// Without a pulled record, the deletion stands at the lowest version
	// it can have.
	s2, _ := setup(t, Config{})
	pulled(t, s2, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s2, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	op = claim(t, s2)
	if err := s2.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	if e, _ := entity(t, s2, "n"); e.Server == nil || !e.Server.Deleted || e.Server.Version != 2 {
		t.Fatalf("after the 410: server %+v", e.Server)
	}
}

// TestPatchOfDeletedConflictBringsTheRecordBack: the app edits an entity
// in a deleted_on_server conflict: that is keeping its data, a create
// that brings the record back (not an update that meets the deletion
// again, made on the deletion's version). The checker found a device
// whose second write over such a conflict left it based on the
// tombstone, so that a 410 then made up a deletion at the version the
// record came back at, and the revival was skipped.
func TestPatchOfDeletedConflictBringsTheRecordBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	op := claim(t, s)
	pulled(t, s, "n", "srv-n", 2, "")
	if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"again":1}`)})
	if r.Operation.Type != OpCreate {
		t.Fatalf("the edit is a %s", r.Operation.Type)
	}
	if _, err := s.GetOperation(op.ID); !errors.Is(err, ErrOperationNotFound) {
		t.Fatalf("the refused update: %v", err)
	}
	c := claim(t, s)
	if c.ID != r.Operation.ID {
		t.Fatalf("claimed %s", c.ID)
	}
	if _, err := s.Complete(ctx, c.ID, "w", Completion{ServerID: "srv-n", ServerVersion: 3}); err != nil {
		t.Fatal(err)
	}
	if e, _ := entity(t, s, "n"); e.SyncState != SyncSynced || e.ServerVersion != 3 {
		t.Fatalf("%+v", e)
	}
	// A revival by another device at the next version is taken.
	pulled(t, s, "n", "srv-n", 4, `{"by":"B"}`)
	if e, _ := entity(t, s, "n"); string(e.Data) != `{"by":"B"}` {
		t.Fatalf("%+v", e)
	}
}

// TestRecreatedRecordIsAnotherRecord (case 3): the server's record was
// deleted, swept and created again under the same client id (a new
// server id at version 1): the device takes it, whatever the version it
// had; with local changes unsent, it is kept beside them, a 404 for the
// old record does not replace it, and resolving writes to the new one.
func TestRecreatedRecordIsAnotherRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("synced", func(t *testing.T) {
		s, _ := setup(t, Config{})
		pulled(t, s, "n", "srv-old", 5, `{"v":"old"}`)
		pulled(t, s, "n", "srv-new", 1, `{"v":"new"}`)
		e, _ := entity(t, s, "n")
		if e.ServerID != "srv-new" || e.ServerVersion != 1 || string(e.Data) != `{"v":"new"}` || e.SyncState != SyncSynced {
			t.Fatalf("%+v", e)
		}
		// The page read again: skipped.
		pulled(t, s, "n", "srv-new", 1, `{"v":"new"}`)
		if e2, _ := entity(t, s, "n"); e2.Version != e.Version {
			t.Fatalf("a page read again changed it: %+v", e2)
		}
	})
	t.Run("edited", func(t *testing.T) {
		s, _ := setup(t, Config{})
		pulled(t, s, "n", "srv-old", 5, `{"v":"old"}`)
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
		pulled(t, s, "n", "srv-new", 1, `{"v":"new"}`)
		op := claim(t, s)
		// The update went to srv-old: 404, deleted on the server.
		if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
			t.Fatal(err)
		}
		e, _ := entity(t, s, "n")
		if e.SyncState != SyncConflict || e.Server == nil || e.Server.ID != "srv-new" || e.Server.Deleted {
			t.Fatalf("%+v server %+v", e, e.Server)
		}
		e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeLocal, "")
		if err != nil || e.ServerID != "srv-new" || e.ServerVersion != 1 || string(e.Data) != `{"v":"mine"}` {
			t.Fatalf("take local: %+v %v", e, err)
		}
		if op := claim(t, s); op.Type != OpUpdate {
			t.Fatalf("the resolution is a %s", op.Type)
		}
	})
}

// TestDiscardOfPulledEntityRefreshes (case 4): discarding a refused
// update of an entity the server's data of which is not kept (pulled,
// no synced operation) does not leave the refused data synced: the
// entity is stale until the record is read again.
func TestDiscardOfPulledEntityRefreshes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 2, `{"v":"server"}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"refused"}`)})
	op := claim(t, s)
	if err := s.Decline(ctx, op.ID, "w", "validation", "no"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncStale || e.SyncCode != StaleRefreshNeeded {
		t.Fatalf("after the discard: %+v", e)
	}
	refs, err := s.NeedsRefresh("acct", 10)
	if err != nil || len(refs) != 1 || refs[0] != (EntityRef{Type: "note", ID: "n"}) {
		t.Fatalf("refresh set %v %v", refs, err)
	}
	// The record read again, at the version known: taken.
	e, removed, err := s.ApplyRecord(ctx, "acct", "note", "n", &Change{EntityType: "note", EntityID: "n", ServerID: "srv-n", Version: 2, Data: json.RawMessage(`{"v":"server"}`)})
	if err != nil || removed || e.SyncState != SyncSynced || string(e.Data) != `{"v":"server"}` || e.Server != nil {
		t.Fatalf("refreshed: %+v %v %v", e, removed, err)
	}
	if refs, _ := s.NeedsRefresh("acct", 10); len(refs) != 0 {
		t.Fatalf("still in the refresh set: %v", refs)
	}
	// A record older than known (a replica behind) changes nothing.
	e, _, err = s.ApplyRecord(ctx, "acct", "note", "n", &Change{EntityType: "note", EntityID: "n", ServerID: "srv-n", Version: 1, Data: json.RawMessage(`{"v":"older"}`)})
	if err != nil || string(e.Data) != `{"v":"server"}` {
		t.Fatalf("older record: %+v %v", e, err)
	}
	// Nothing on the server under the id: a synced entity goes.
	if _, removed, err := s.ApplyRecord(ctx, "acct", "note", "n", nil); err != nil || !removed {
		t.Fatalf("record gone: %v %v", removed, err)
	}
}

// TestDiscardWithPulledRecordBesideTakesIt (case 4): when a pull kept
// the server's newer record beside the refused update, the discard
// takes that record.
func TestDiscardWithPulledRecordBesideTakesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"refused"}`)})
	op := claim(t, s)
	pulled(t, s, "n", "srv-n", 2, `{"v":2}`)
	if err := s.Decline(ctx, op.ID, "w", "validation", "no"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncSynced || string(e.Data) != `{"v":2}` || e.ServerVersion != 2 {
		t.Fatalf("after the discard: %+v", e)
	}
}

// TestCreateAnsweredWithAnotherDevicesRecord (case 6): a create answered
// 200 with other data (another device created the id first) leaves the
// entity based on no version of that record, so what follows is sent
// with baseVersion 0 (a server with policy reject refuses it); the
// answer to this device's next write bases it again.
func TestCreateAnsweredWithAnotherDevicesRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	create(t, s, "today", `{"text":"B"}`)
	op := claim(t, s)
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-t", ServerVersion: 1, OtherData: true, ServerPayloadVersion: 1}); err != nil {
		t.Fatal(err)
	}
	row, err := s.EntityRow("acct", "note", "today")
	if err != nil || !row.Unbased || row.ServerVersion != 0 || row.ServerID != "srv-t" || row.SyncState != SyncPending {
		t.Fatalf("after the create: %+v %v", row, err)
	}
	resend := claim(t, s)
	if resend.Type != OpUpdate {
		t.Fatalf("resend is a %s", resend.Type)
	}
	if _, err := s.Complete(ctx, resend.ID, "w", Completion{ServerID: "srv-t", ServerVersion: 2}); err != nil {
		t.Fatal(err)
	}
	row, _ = s.EntityRow("acct", "note", "today")
	if row.Unbased || row.ServerVersion != 2 || row.SyncState != SyncSynced {
		t.Fatalf("after the resend: %+v", row)
	}
}

// TestDeleteConflictIsVisible (case 7): a delete refused for a conflict
// leaves the entity readable and listed by ?syncState=conflict; creating
// the id again resolves it as an update of the server's record.
func TestDeleteConflictIsVisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpDelete, EntityID: "n"})
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "edited elsewhere", ServerState{Version: 2, Data: json.RawMessage(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	e, ok := entity(t, s, "n")
	if !ok || !e.Deleted || e.SyncState != SyncConflict || e.SyncCode != CodeVersionConflict {
		t.Fatalf("GET: %v %+v", ok, e)
	}
	items, _, err := s.ListEntities("acct", "note", ListOptions{SyncState: SyncConflict})
	if err != nil || len(items) != 1 || items[0].ID != "n" {
		t.Fatalf("conflicts listed: %+v %v", items, err)
	}
	if items, _, _ := s.ListEntities("acct", "note", ListOptions{}); len(items) != 0 {
		t.Fatalf("a deleted entity among the live ones: %+v", items)
	}
	// The app creates it again: an update made on the server's v2.
	create(t, s, "n", `{"v":"again"}`)
	e, _ = entity(t, s, "n")
	if e.SyncState != SyncPending || e.ServerVersion != 2 || e.Deleted {
		t.Fatalf("created again: %+v", e)
	}
	next := claim(t, s)
	if next.Type != OpUpdate || string(next.Payload) != `{"v":"again"}` {
		t.Fatalf("the create goes as %s %s", next.Type, next.Payload)
	}
}

// TestFullPassKeepsTheRecordsRemovalBesideUnsentChanges: a full pass
// that does not see a record the device has unsent changes of keeps the
// changes, and records that the server no longer holds it, so a resolve
// of the conflict their answer makes does not bring it back as synced.
func TestFullPassKeepsTheRecordsRemovalBesideUnsentChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 3, `{"v":3}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	if err := s.RestartPull(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	applyPage(t, s, "", "end", true)
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncPending || e.Server == nil || !e.Server.Deleted || e.Server.Version != 4 {
		t.Fatalf("%+v server %+v", e, e.Server)
	}
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	if _, removed, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, ""); err != nil || !removed {
		t.Fatalf("take server: %v %v", removed, err)
	}
}

// TestCreateMakingANewRecordRebases: a create answered with a new server
// id (the record under the client id was swept, so the server made a
// new one) bases the entity on that record at its version, however high
// the old record's was, and forgets what was known of the old one.
func TestCreateMakingANewRecordRebases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-old", 5, `{"v":5}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resolve(ctx, "acct", "note", "n", TakeLocal, ""); err != nil {
		t.Fatal(err)
	}
	create := claim(t, s)
	if create.Type != OpCreate {
		t.Fatalf("the resolution is a %s", create.Type)
	}
	if _, err := s.Complete(ctx, create.ID, "w", Completion{ServerID: "srv-new", ServerVersion: 1}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.ServerID != "srv-new" || e.ServerVersion != 1 || e.Server != nil || e.SyncState != SyncSynced {
		t.Fatalf("%+v server %+v", e, e.Server)
	}
	// The feed's echo of it is skipped; its next version is taken.
	pulled(t, s, "n", "srv-new", 1, `{"v":"mine"}`)
	pulled(t, s, "n", "srv-new", 2, `{"v":"two"}`)
	if e, _ := entity(t, s, "n"); string(e.Data) != `{"v":"two"}` {
		t.Fatalf("%+v", e)
	}
}

// TestGoneAnswerDoesNotHideARevival: a fresh 410 meets a deletion the
// pull already kept beside the edit; the deletion's version is kept, not
// raised, so the record brought back after it (the next version) is
// taken, and resolving takes the live record. (The convergence checker
// found B removing a record A had created again.)
func TestGoneAnswerDoesNotHideARevival(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	pulled(t, s, "n", "srv-n", 2, "") // A deleted it
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeDeletedOnServer, "gone", ServerState{Deleted: true}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.Server == nil || !e.Server.Deleted || e.Server.Version != 2 {
		t.Fatalf("after the 410: server %+v", e.Server)
	}
	pulled(t, s, "n", "srv-n", 3, `{"v":"again"}`) // A created it again
	e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, "")
	if err != nil || string(e.Data) != `{"v":"again"}` || e.ServerVersion != 3 {
		t.Fatalf("take server: %+v %v", e, err)
	}
}

// TestReplayedDeleteKeepsARevival: this device's delete is applied (v12)
// but its answer lost; another device creates the record again (v13),
// which the pull keeps beside the unfinished delete; the resend's
// replayed answer (v12) must not remove the record the server holds
// live.
func TestReplayedDeleteKeepsARevival(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 11, `{"v":11}`)
	mustApply(t, s, Write{Op: OpDelete, EntityID: "n"})
	op := claim(t, s)
	pulled(t, s, "n", "srv-n", 13, `{"v":13}`)
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-n", ServerVersion: 12}); err != nil {
		t.Fatal(err)
	}
	e, ok := entity(t, s, "n")
	if !ok || e.Deleted || string(e.Data) != `{"v":13}` || e.ServerVersion != 13 || e.SyncState != SyncSynced {
		t.Fatalf("%v %+v", ok, e)
	}
}

// TestDiscardOfRefusedDeleteTakesTheServersRecord: a delete of a pulled
// entity refused for a conflict (another device edited it), then
// discarded: the entity comes back as the server holds it, and nothing
// the user did not write is sent (the attack on issue 25 saw an update
// of the pre-delete data queued, refused in turn).
func TestDiscardOfRefusedDeleteTakesTheServersRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "x", "srv-x", 1, `{"t":"v1"}`)
	mustApply(t, s, Write{Op: OpDelete, EntityID: "x"})
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "edited elsewhere", ServerState{Version: 2, Data: json.RawMessage(`{"t":"A-edit"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	e, ok := entity(t, s, "x")
	if !ok || e.SyncState != SyncSynced || string(e.Data) != `{"t":"A-edit"}` || e.ServerVersion != 2 || e.Deleted {
		t.Fatalf("%v %+v", ok, e)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 0 {
		t.Fatalf("something was queued: %v", st.Counts)
	}
}

// TestUpdateOfTooLargeStaleEntityIsRefused: an entity whose newer
// server version is over this device's data limit is not updated (the
// patch over the old data would replace a version nobody here saw,
// silently under last-writer-wins): ErrEntityStale; a delete is allowed.
func TestUpdateOfTooLargeStaleEntityIsRefused(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{MaxDataBytes: 100})
	pulled(t, s, "x", "srv-x", 1, `{"t":"small"}`)
	pulled(t, s, "x", "srv-x", 2, `{"t":"`+strings.Repeat("x", 200)+`"}`)
	if e, _ := entity(t, s, "x"); e.SyncState != SyncStale || e.SyncCode != StaleTooLarge {
		t.Fatalf("%+v", e)
	}
	_, err := s.Apply(context.Background(), Write{Op: OpUpdate, AccountID: "acct", EntityType: "note", EntityID: "x", Data: json.RawMessage(`{"t":"edit"}`)})
	if !errors.Is(err, ErrEntityStale) {
		t.Fatalf("update of a stale entity: %v", err)
	}
	mustApply(t, s, Write{Op: OpDelete, EntityID: "x"})
}

// TestDiscardOfRefusedCreateKeepsTheServersRecord: a create refused by
// the server while a pull brought another device's record under the
// same id: discarding the create takes that record, instead of removing
// the entity the server holds (the feed would not bring it again).
func TestDiscardOfRefusedCreateKeepsTheServersRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	c := create(t, s, "x", `{"mine":1}`).Operation
	pulled(t, s, "x", "srv-x", 1, `{"theirs":1}`)
	decline(t, s, claimOnly(t, s, c.ID))
	if err := s.Discard(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	e, ok := entity(t, s, "x")
	if !ok || e.SyncState != SyncSynced || string(e.Data) != `{"theirs":1}` || e.ServerID != "srv-x" || e.ServerVersion != 1 {
		t.Fatalf("%v %+v", ok, e)
	}
}

// TestConflictOfDeleteWithTheEntityMadeAgainStaysResolvable: a delete
// queued, the entity made again behind it, then the delete refused for a
// conflict; an edit after that is no resolution (the refused delete is
// not renewed), so the entity stays in conflict, and a pull that brings
// a newer record keeps it so: resolve works (the checker met such
// entities failed with version_conflict, which resolve refused).
func TestConflictOfDeleteWithTheEntityMadeAgainStaysResolvable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "x", "srv-x", 1, `{"v":1}`)
	del := mustApply(t, s, Write{Op: OpDelete, EntityID: "x"}).Operation
	create(t, s, "x", `{"v":"again"}`)
	op := claim(t, s)
	if op.ID != del.ID {
		t.Fatalf("claimed %s", op.ID)
	}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "edited elsewhere", ServerState{Version: 2, Data: json.RawMessage(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "x", Data: json.RawMessage(`{"w":1}`)})
	if e, _ := entity(t, s, "x"); e.SyncState != SyncConflict || e.Server == nil {
		t.Fatalf("after the edit: %+v", e)
	}
	pulled(t, s, "x", "srv-x", 3, `{"v":3}`)
	e, _ := entity(t, s, "x")
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Version != 3 {
		t.Fatalf("after the pull: %+v server %+v", e, e.Server)
	}
	e, _, err := s.Resolve(ctx, "acct", "note", "x", TakeLocal, "")
	if err != nil || e.ServerVersion != 3 || string(e.Data) != `{"v":"again","w":1}` {
		t.Fatalf("take local: %+v %v", e, err)
	}
	if next := claim(t, s); next.Type != OpUpdate {
		t.Fatalf("the resolution is a %s", next.Type)
	}
}

// TestConflictWithoutItsServerRecordIsReadAgain: a conflict whose server
// record beside the entity was lost (a path dropped it) stays a
// conflict, with the record marked as not held, and is read again: the
// refresh brings the record, and the conflict shows it.
func TestConflictWithoutItsServerRecordIsReadAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	pulled(t, s, "n", "srv-n", 1, `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"mine"}`)})
	op := claim(t, s)
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "newer", ServerState{Version: 3, Data: json.RawMessage(`{"v":3}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.update(ctx, func(tx *txw) error {
		e, err := tx.loadEntity("acct", "note", "n")
		if err != nil {
			return err
		}
		e.Server = nil // as a path that drops it would
		return tx.reconcile(e, true)
	}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Missing != StaleRefreshNeeded {
		t.Fatalf("%+v server %+v", e, e.Server)
	}
	if refs, _ := s.NeedsRefresh("acct", 10); len(refs) != 1 {
		t.Fatalf("refresh set %v", refs)
	}
	e, _, err := s.ApplyRecord(ctx, "acct", "note", "n", &Change{EntityType: "note", EntityID: "n", ServerID: "srv-n", Version: 3, Data: json.RawMessage(`{"v":3}`)})
	if err != nil || e.SyncState != SyncConflict || e.Server == nil || e.Server.Missing != "" || string(e.Server.Data) != `{"v":3}` {
		t.Fatalf("after the refresh: %+v server %+v %v", e, e.Server, err)
	}
	if refs, _ := s.NeedsRefresh("acct", 10); len(refs) != 0 {
		t.Fatalf("still in the refresh set: %v", refs)
	}
}
