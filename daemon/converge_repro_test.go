package daemon

import (
	"context"
	"reflect"
	"testing"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
)

// TestRenewedEditOfDeletedRecordKeepsItsRevival reduces the checker's
// "live on the server, missing on the device" (postgres-lww
// seed=808834872, note/e11 on dev0) to two daemons.
//
// NOTE: this test FAILS on the engine at 9479858 (the root cause, for the
// engine's owners to fix; it is not fixed here):
//
//  1. B's edit of x (made on v1) meets A's delete of x (v2): 410,
//     conflict deleted_on_server, the deletion kept beside (v2).
//  2. The app PATCHes x again, the documented resolution of a conflict:
//     queue (tx.apply) makes it "a change made on the server's version",
//     ServerVersion = max(1, Server.Version) = 2, and drops Server. The
//     entity is now based on the tombstone's version, and nothing says
//     that version is a deletion.
//  3. The renewed head goes on baseVersion 2 and is answered 410 again.
//     Store.Conflict takes a fresh 410 as gone(ServerID): "one past the
//     newest version known", ServerVersion+1 = 3. But the newest known
//     version (2) IS the deletion: B now believes in a deletion at v3
//     that the server never made.
//  4. A creates x again: the server brings the record back, same id,
//     version 3, live.
//  5. B's pull: newer({v3 live}) against Server {v3 deleted} is false:
//     skipped; the cursor moves past it and the feed never brings it
//     again.
//  6. The app resolves take server (as the checker does): Server is
//     deleted, so the entity is removed. The server holds x live; B
//     does not, forever.
//
// (The same fabricated deletion also wins when the pull lands the
// revival first and a 410 answered before it is recorded after it:
// gone() then makes the live v3 a deletion at v4.)
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

	// 2-3. The app edits x again: the renewed head gets 410 again.
	b.write(queue.OpUpdate, "x", `{"by":"B2"}`)
	b.waitFor("x in conflict again", func() bool {
		e, ok := b.entity("x")
		return ok && e.SyncState == queue.SyncConflict && e.Server != nil && e.Server.Deleted
	})
	e, _ := b.entity("x")
	tomb := w.record("x")
	t.Logf("B after the second 410: serverVersion=%d server=%+v; the server's tombstone is v%d", e.ServerVersion, *e.Server, tomb.Version)
	if e.Server.Version > tomb.Version {
		t.Errorf("B keeps a deletion at v%d beside x; the server deleted it at v%d and made no later version", e.Server.Version, tomb.Version)
	}

	// 4. A creates x again: the same record, brought back at v3. A
	// marker written after it (once it is sent: two entities' writes go
	// out in parallel) tells when B's pull has read past it.
	a.write(queue.OpCreate, "x", `{"v":"again"}`)
	a.waitFor("created again", a.synced)
	a.write(queue.OpCreate, "marker", `{}`)
	a.waitFor("marker sent", a.synced)
	rec := w.record("x")
	if rec.Deleted || rec.ID != tomb.ID || rec.Version != tomb.Version+1 {
		t.Fatalf("the server's x after the create: %+v (tombstone %+v)", rec, tomb)
	}
	b.waitFor("B pulled past x's revival", func() bool { _, ok := b.entity("marker"); return ok })

	// 5. B must know the server holds x live again.
	e, _ = b.entity("x")
	t.Logf("B's x after the pull: syncState=%s serverVersion=%d server=%+v", e.SyncState, e.ServerVersion, e.Server)
	if e.Server == nil || e.Server.Deleted || e.Server.Version != rec.Version {
		t.Errorf("B's record beside x is %+v; the server holds x live at v%d", e.Server, rec.Version)
	}

	// 6. The app takes the server's record, as the checker does.
	if e.SyncState == queue.SyncConflict {
		if _, _, err := b.store.Resolve(context.Background(), "alice", "note", "x", queue.TakeServer, ""); err != nil {
			t.Fatal(err)
		}
	}
	b.d.Notify()
	b.waitFor("B settled", b.synced)
	if got, want := b.live(), w.serverLive(); !reflect.DeepEqual(got, want) {
		t.Fatalf("B holds %v, the server %v: x is live on the server and missing on B", got, want)
	}
}
