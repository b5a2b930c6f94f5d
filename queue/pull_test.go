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

func change(id string, version int64, data string) Change {
	c := Change{EntityType: "note", EntityID: id, ServerID: "srv-" + id, Version: version}
	if data == "" {
		c.Deleted = true
	} else {
		c.Data = json.RawMessage(data)
	}
	return c
}

func applyPage(t *testing.T, s *Store, after string, cursor string, last bool, changes ...Change) PageResult {
	t.Helper()
	res, err := s.ApplyChanges(context.Background(), "acct", after, changes, cursor, last)
	if err != nil {
		t.Fatalf("ApplyChanges: %v", err)
	}
	return res
}

func entity(t *testing.T, s *Store, id string) (Entity, bool) {
	t.Helper()
	e, err := s.GetEntity("acct", "note", id)
	if errors.Is(err, ErrEntityNotFound) {
		return e, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return e, true
}

// sendAndComplete claims the account's next operation and completes it
// as the server would answer, with the record's new version.
func sendAndComplete(t *testing.T, s *Store, serverID string, version int64) Operation {
	t.Helper()
	ctx := context.Background()
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: serverID, ServerVersion: version}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return op
}

// TestApplyChangesRules: each apply rule of a pulled change, and the
// cursor saved with the page.
func TestApplyChangesRules(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()

	// A new device: records arrive synced.
	res := applyPage(t, s, "", "c1", false, change("a", 1, `{"v":1}`), change("b", 3, `{"v":3}`), change("gone", 2, ""))
	if res.Applied != 2 || res.Skipped != 1 {
		t.Fatalf("first page: %+v", res)
	}
	a, ok := entity(t, s, "a")
	if !ok || a.SyncState != SyncSynced || a.ServerVersion != 1 || a.ServerID != "srv-a" || string(a.Data) != `{"v":1}` {
		t.Fatalf("a = %+v", a)
	}
	if _, ok := entity(t, s, "gone"); ok {
		t.Fatal("a deleted record of an absent entity was inserted")
	}
	st, _ := s.LoadPullState("acct")
	if st.Cursor != "c1" || !st.FullPass || st.Received != 3 {
		t.Fatalf("pull state %+v", st)
	}

	// Newer version of a synced entity: taken. Same or older: skipped
	// (an echo, a page read again).
	res = applyPage(t, s, "c1", "c2", false, change("a", 2, `{"v":2}`), change("b", 3, `{"v":"old"}`), change("b", 2, `{"v":"older"}`))
	if res.Applied != 1 || res.Skipped != 2 {
		t.Fatalf("second page: %+v", res)
	}
	if a, _ := entity(t, s, "a"); string(a.Data) != `{"v":2}` || a.ServerVersion != 2 {
		t.Fatalf("a after v2: %+v", a)
	}
	if b, _ := entity(t, s, "b"); string(b.Data) != `{"v":3}` {
		t.Fatalf("b changed by an old version: %+v", b)
	}

	// A local edit waiting to be sent wins locally on the fields it
	// changes; the server's other fields show at once (the server's
	// record with the edit laid over it), the record is kept beside it,
	// and the edit goes out based on the version it was made on.
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"local":true}`)})
	res = applyPage(t, s, "c2", "c3", false, change("a", 3, `{"v":3}`))
	if res.Kept != 1 {
		t.Fatalf("page over a pending edit: %+v", res)
	}
	a, _ = entity(t, s, "a")
	if a.SyncState != SyncPending || string(a.Data) != `{"local":true,"v":3}` || a.ServerVersion != 2 ||
		a.Server == nil || a.Server.Version != 3 || string(a.Server.Data) != `{"v":3}` {
		t.Fatalf("a with a pending edit after a pull: %+v (server %+v)", a, a.Server)
	}
	// The edit reaches the server (last writer wins there): version 4.
	// The feed's echo of it changes nothing.
	sendAndComplete(t, s, "srv-a", 4)
	a, _ = entity(t, s, "a")
	if a.SyncState != SyncSynced || a.ServerVersion != 4 || a.Server != nil {
		t.Fatalf("a after its edit was applied: %+v (server %+v)", a, a.Server)
	}
	res = applyPage(t, s, "c3", "c4", false, change("a", 4, `{"local":true,"v":2}`))
	if res.Skipped != 1 {
		t.Fatalf("echo of the device's own write: %+v", res)
	}

	// A remote delete of a synced entity removes it locally.
	applyPage(t, s, "c4", "c5", false, change("b", 4, ""))
	if _, ok := entity(t, s, "b"); ok {
		t.Fatal("b still here after the server deleted it")
	}

	// A remote delete against a local pending edit: the edit is kept.
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"again":1}`)})
	applyPage(t, s, "c5", "c6", false, change("a", 5, ""))
	a, ok = entity(t, s, "a")
	if !ok || a.SyncState != SyncPending || a.Server == nil || !a.Server.Deleted {
		t.Fatalf("a, edited, after a remote delete: %+v (server %+v)", a, a.Server)
	}

	// A page read after another cursor than the stored one is refused.
	if _, err := s.ApplyChanges(ctx, "acct", "c1", []Change{change("z", 1, `{}`)}, "c9", false); !errors.Is(err, ErrPullCursorMoved) {
		t.Fatalf("stale page: %v", err)
	}
	if _, ok := entity(t, s, "z"); ok {
		t.Fatal("a stale page was applied")
	}
	// A change this store cannot hold is skipped, not an error.
	res = applyPage(t, s, "c6", "c7", false, Change{EntityType: "bad type!", EntityID: "x", Version: 1, Data: json.RawMessage(`{}`)},
		Change{EntityType: "note", EntityID: "y", Version: 1, Data: json.RawMessage(`[1]`)},
		Change{EntityType: "note", EntityID: "dup", Version: 1, Data: json.RawMessage(`{"a":1,"a":2}`)},
		Change{EntityType: "note", EntityID: "big", Version: 1, Data: json.RawMessage(`{"a":"` + strings.Repeat("x", DefaultMaxDataBytes) + `"}`)})
	if res.Skipped != 3 || res.Applied != 1 {
		t.Fatalf("unholdable changes: %+v", res)
	}
	// One over this device's data limit is not skipped: the entity is
	// there, stale, its data not held (issue 25, case 9).
	big, ok := entity(t, s, "big")
	if !ok || big.SyncState != SyncStale || big.SyncCode != StaleTooLarge || big.Data != nil || big.ServerVersion != 1 {
		t.Fatalf("big: %+v", big)
	}
}

// TestFullPassRemovesWhatTheServerNoLongerHolds: a read from the
// beginning ends by removing the synced entities it did not see, and
// never an entity with unsent changes or one the server never had.
func TestFullPassRemovesWhatTheServerNoLongerHolds(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()
	applyPage(t, s, "", "c1", true, change("keep", 1, `{"v":1}`), change("swept", 1, `{"v":1}`), change("edited", 1, `{"v":1}`))
	if st, _ := s.LoadPullState("acct"); st.FullPass {
		t.Fatal("the full pass did not end with its last page")
	}
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "edited", Data: json.RawMessage(`{"v":2}`)})
	create(t, s, "local-only", `{"new":true}`)

	// The cursor expired: everything again, in two pages; "swept" and
	// "edited" are no longer on the server (their tombstones were swept).
	if err := s.RestartPull(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.LoadPullState("acct"); st.Cursor != "" || !st.FullPass {
		t.Fatalf("after RestartPull: %+v", st)
	}
	res := applyPage(t, s, "", "p1", false, change("keep", 1, `{"v":1}`))
	if res.Removed != 0 {
		t.Fatalf("removed before the pass ended: %+v", res)
	}
	if st, _ := s.LoadPullState("acct"); st.Seen != 1 || !st.FullPass {
		t.Fatalf("pass progress %+v", st)
	}
	res = applyPage(t, s, "p1", "p2", true)
	if res.Removed != 1 {
		t.Fatalf("end of the pass: %+v", res)
	}
	for id, want := range map[string]bool{"keep": true, "swept": false, "edited": true, "local-only": true} {
		if _, ok := entity(t, s, id); ok != want {
			t.Errorf("%s present = %v, want %v", id, ok, want)
		}
	}
}

// TestConflictAndResolve: a version_conflict answer puts the entity in
// conflict with the server's record beside it; resolving takes either
// side, and a new update on the entity is made on the server's version.
func TestConflictAndResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setupConflict := func(t *testing.T, id string, server ServerState) *Store {
		s, _ := setup(t, Config{})
		create(t, s, id, `{"v":1}`)
		sendAndComplete(t, s, "srv-"+id, 1)
		mustApply(t, s, Write{Op: OpUpdate, EntityID: id, Data: json.RawMessage(`{"v":"mine"}`)})
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "the server holds version 2", server); err != nil {
			t.Fatal(err)
		}
		e, _ := entity(t, s, id)
		if e.SyncState != SyncConflict || e.Server == nil || e.Server.Version != server.Version || e.ServerVersion != 1 {
			t.Fatalf("after the conflict: %+v (server %+v)", e, e.Server)
		}
		return s
	}
	theirs := ServerState{Version: 2, Data: json.RawMessage(`{"v":"theirs"}`)}

	t.Run("take server", func(t *testing.T) {
		s := setupConflict(t, "n", theirs)
		e, removed, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, "")
		if err != nil || removed || e.SyncState != SyncSynced || string(e.Data) != `{"v":"theirs"}` || e.ServerVersion != 2 || e.Server != nil {
			t.Fatalf("take server: %+v %v %v", e, removed, err)
		}
		if st, _ := s.Stats(); st.Counts[StatePermanentFailed] != 0 || st.Counts[StatePending] != 0 {
			t.Fatalf("operations left: %v", st.Counts)
		}
		if _, _, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, ""); !errors.Is(err, ErrNoConflict) {
			t.Fatalf("resolve of a synced entity: %v", err)
		}
	})
	t.Run("take local", func(t *testing.T) {
		s := setupConflict(t, "n", theirs)
		e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeLocal, "")
		if err != nil || e.SyncState != SyncPending || string(e.Data) != `{"v":"mine"}` || e.ServerVersion != 2 {
			t.Fatalf("take local: %+v %v", e, err)
		}
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.Type != OpUpdate || string(op.Payload) != `{"v":"mine"}` {
			t.Fatalf("the resend: %+v %v", op, err)
		}
	})
	t.Run("take server that deleted it", func(t *testing.T) {
		s := setupConflict(t, "n", ServerState{Version: 3, Deleted: true})
		_, removed, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, "")
		if err != nil || !removed {
			t.Fatalf("take server's delete: %v %v", removed, err)
		}
		if _, ok := entity(t, s, "n"); ok {
			t.Fatal("entity still here")
		}
	})
	t.Run("take local over the server's delete", func(t *testing.T) {
		s := setupConflict(t, "n", ServerState{Version: 3, Deleted: true})
		e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeLocal, "")
		if err != nil || e.SyncState != SyncPending {
			t.Fatalf("take local: %+v %v", e, err)
		}
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.Type != OpCreate {
			t.Fatalf("the resend is %+v %v, want a create (the server deleted the record)", op, err)
		}
	})
	t.Run("an update resolves", func(t *testing.T) {
		s := setupConflict(t, "n", theirs)
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"v":"merged"}`)})
		e, _ := entity(t, s, "n")
		if e.SyncState != SyncPending || e.ServerVersion != 2 || e.Server != nil {
			t.Fatalf("after an update: %+v", e)
		}
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || string(op.Payload) != `{"v":"merged"}` || op.Key() == op.ID {
			t.Fatalf("the update goes as the conflicting operation under a new key: %+v %v", op, err)
		}
	})
	t.Run("bad take", func(t *testing.T) {
		s := setupConflict(t, "n", theirs)
		if _, _, err := s.Resolve(ctx, "acct", "note", "n", "both", ""); !errors.Is(err, ErrInvalidWrite) {
			t.Fatalf("take both: %v", err)
		}
	})
}

// TestPullStateSurvivesReopen: the cursor and counters are in the file.
func TestPullStateSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir+"/syncd.db", Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyChanges(context.Background(), "acct", "", []Change{change("a", 1, `{}`)}, "c1", true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(dir+"/syncd.db", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.LoadPullState("acct")
	if err != nil || st.Cursor != "c1" || st.Received != 1 || st.FullPass {
		t.Fatalf("after reopen: %+v %v", st, err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestFullPassKeepsWhatThisDevicePushedMeanwhile: an entity this device
// put on the server after the pass's pages were read is not removed at
// the pass's end (its page could not show it).
func TestFullPassKeepsWhatThisDevicePushedMeanwhile(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()
	if err := s.BeginFullPass(ctx, "acct"); err != nil {
		t.Fatal(err)
	}
	create(t, s, "pushed", `{}`)
	// The (empty) last page was read here, before the push landed.
	sendAndComplete(t, s, "srv-pushed", 1)
	if res := applyPage(t, s, "", "c1", true); res.Removed != 0 {
		t.Fatalf("the pass removed %d", res.Removed)
	}
	if _, ok := entity(t, s, "pushed"); !ok {
		t.Fatal("the pushed entity was removed by the pass")
	}
}

// TestNewerServerRecordIsTakenWhenLocalChangesSettle: a pull brings
// another device's later write while this device's own write is still
// in flight; when that write completes (at an older version), the
// entity takes the newer record instead of staying on its own data.
func TestNewerServerRecordIsTakenWhenLocalChangesSettle(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{})
	ctx := context.Background()
	create(t, s, "x", `{"v":0}`)
	sendAndComplete(t, s, "srv-x", 1)
	applyPage(t, s, "", "c1", true, change("x", 1, `{"v":0}`))
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "x", Data: json.RawMessage(`{"by":"A"}`)})
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The server applied A's update (version 2), then B's (3); the
	// feed shows x at 3 before A records its answer.
	applyPage(t, s, "c1", "c2", false, change("x", 3, `{"v":0,"by":"B"}`))
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-x", ServerVersion: 2}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "x")
	if e.SyncState != SyncSynced || e.ServerVersion != 3 || e.Server != nil || string(e.Data) != `{"by":"B","v":0}` {
		t.Fatalf("x = %+v (server %+v), want B's later record", e, e.Server)
	}
}

// TestListEntitiesBoundsBytes: a page of big entities ends past
// MaxListBytes of data, with a next, and paging reads them all.
func TestListEntitiesBoundsBytes(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	big := `{"x":"` + strings.Repeat("y", 1<<20-16) + `"}`
	for i := range 20 {
		create(t, s, fmt.Sprintf("n%02d", i), big)
	}
	page, next, err := s.ListEntities("acct", "note", ListOptions{Limit: 1000})
	if err != nil || len(page) == 0 || len(page) >= 20 || next == "" {
		t.Fatalf("first page: %d items, next %q, %v", len(page), next, err)
	}
	total := len(page)
	for next != "" {
		page, next, err = s.ListEntities("acct", "note", ListOptions{Limit: 1000, After: next})
		if err != nil {
			t.Fatal(err)
		}
		total += len(page)
	}
	if total != 20 {
		t.Fatalf("%d entities over the pages, want 20", total)
	}
}
