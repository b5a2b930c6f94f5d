package daemon

import (
	"reflect"
	"testing"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
)

// TestRenewedEditOfDeletedRecordKeepsItsRevival reduces the checker's
// "live on the server, missing on the device" (postgres-lww
// seed=808834872, note/e11 on dev0) to two daemons. Before the fix:
//
//  1. B's edit of x (made on v1) met A's delete of x (v2): 410,
//     conflict deleted_on_server, the deletion kept beside (v2).
//  2. The app PATCHed x again: the entity was based on the tombstone's
//     version (2) and the deletion dropped; the renewed update was
//     answered 410 again, and Store.Conflict made up a deletion one past
//     the newest version known: v3, which the server never made.
//  3. A created x again: the server brought the record back at v3; B's
//     pull took it as not newer than its made-up deletion and skipped
//     it, and a take of the server's record removed x from B for good.
//
// Now a PATCH of an entity the server deleted brings the record back (a
// create, as resolve take local does), and an answer without a version
// never makes up one: it keeps what the pull kept, or stands at the
// lowest version it can have. queue/converge_test.go has the store's
// side (TestPatchOfDeletedConflictBringsTheRecordBack,
// TestGoneAnswerKeepsWhatThePullKept).
func TestRenewedEditOfDeletedRecordKeepsItsRevival(t *testing.T) {
	t.Parallel()
	w := newTwoWay(t, remote.Config{})
	a := w.device("A", Config{})
	a.write(queue.OpCreate, "x", `{"v":1}`)
	a.waitFor("sent", a.synced)
	b := w.device("B", Config{})
	b.waitFor("has x v1", func() bool { e, ok := b.entity("x"); return ok && e.ServerVersion == 1 })

	// 1. B edits x offline; A deletes it (v2).
	b.offline(func(s *queue.Store) { apply(t, s, queue.OpUpdate, "x", `{"by":"B1"}`) })
	a.write(queue.OpDelete, "x", "")
	a.waitFor("deleted", a.synced)
	b.start(w.url)
	b.waitFor("x in conflict (deleted_on_server)", func() bool {
		e, ok := b.entity("x")
		return ok && e.SyncState == queue.SyncConflict && e.SyncCode == queue.CodeDeletedOnServer && e.Server != nil && e.Server.Deleted
	})

	// 2. The app edits x again: it brings x back.
	if r := b.write(queue.OpUpdate, "x", `{"by":"B2"}`); r.Operation.Type != queue.OpCreate {
		t.Fatalf("the edit of a record the server deleted went as %s", r.Operation.Type)
	}
	b.waitFor("x back on the server", b.synced)
	if rec := w.record("x"); rec.Deleted {
		t.Fatalf("the server's x: %+v", rec)
	}

	// 3. Every device holds what the server holds: A deletes x again and
	// creates it again; B takes every version.
	a.waitFor("A has x back", func() bool { _, ok := a.entity("x"); return ok })
	a.write(queue.OpDelete, "x", "")
	a.waitFor("deleted again", a.synced)
	a.write(queue.OpCreate, "x", `{"v":"again"}`)
	a.waitFor("created again", a.synced)
	want := w.serverLive()
	for _, dv := range []*device{a, b} {
		dv.waitFor("one state", func() bool { return reflect.DeepEqual(dv.live(), want) && dv.synced() })
	}
	if e, _ := b.entity("x"); e.SyncState != queue.SyncSynced || e.ServerVersion != w.record("x").Version {
		t.Fatalf("B's x: %+v", e)
	}
}
