package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestPartitionFIFOAndIndependence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	c1 := create(t, s, "a", `{"v":1}`).Operation
	u1 := mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"v":2}`)}).Operation
	c2 := create(t, s, "b", `{"v":1}`).Operation
	d1 := mustApply(t, s, Write{Op: OpDelete, EntityID: "a"}).Operation

	// Heads of both partitions are claimable; "a"'s update is not while its
	// create is unfinished.
	got1, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || got1.ID != c1.ID {
		t.Fatalf("first claim = %s, %v; want create of a", got1.ID, err)
	}
	got2, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || got2.ID != c2.ID {
		t.Fatalf("second claim = %s, %v; want create of b", got2.ID, err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("third claim: %v; the update of a must wait for its create", err)
	}
	// a's create fails permanently: a is held back, b goes on.
	if err := s.Fail(ctx, c1.ID, "w", "validation", "value too large", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, c2.ID, "w", Completion{ServerID: "sb"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim behind a failed head: %v", err)
	}
	ea, _ := s.GetEntity("acct", "note", "b")
	if ea.SyncState != SyncSynced || ea.ServerID != "sb" {
		t.Fatalf("b = %+v", ea)
	}
	// The user retries: the create is sent, then update, then delete, in order.
	if _, err := s.Retry(ctx, c1.ID); err != nil {
		t.Fatal(err)
	}
	for _, want := range []Operation{c1, u1, d1} {
		got, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || got.ID != want.ID {
			t.Fatalf("claim = %s (%s), %v; want %s", got.ID, got.Type, err, want.Type)
		}
		if _, err := s.Complete(ctx, got.ID, "w", Completion{ServerID: "sa"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetEntity("acct", "note", "a"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("a after its delete is done: %v", err)
	}
	// Another account's operations are never claimed for this one.
	mustApply(t, s, Write{Op: OpCreate, AccountID: "other", EntityID: "x", Data: json.RawMessage(`{}`)})
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim for acct took another account's op: %v", err)
	}
}

func TestApplyReplayAndConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "n1", Data: json.RawMessage(`{"v":1}`), OperationID: "key-1", RequestFingerprint: "fp1"}
	first, err := s.Apply(ctx, w)
	if err != nil || first.Replayed || first.Operation.ID != "key-1" {
		t.Fatalf("first = %+v, %v", first, err)
	}
	seq, _ := s.LastEventSeq()
	again, err := s.Apply(ctx, w)
	if err != nil || !again.Replayed || again.Operation.ID != "key-1" || again.Entity.ID != "n1" {
		t.Fatalf("replay = %+v, %v", again, err)
	}
	w.RequestFingerprint, w.Data = "fp2", json.RawMessage(`{"v":2}`)
	if _, err := s.Apply(ctx, w); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("other body under the same key: %v", err)
	}
	if seq2, _ := s.LastEventSeq(); seq2 != seq {
		t.Fatalf("replay or conflict wrote events: %d -> %d", seq, seq2)
	}
	if st, _ := s.Stats(); st.Counts[StatePending] != 1 {
		t.Fatalf("counts = %v", st.Counts)
	}
}

func TestApplyRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true, MaxDataBytes: 64})
	create(t, s, "n1", `{"v":1}`)
	seq, _ := s.LastEventSeq()
	tests := []struct {
		name string
		w    Write
		want error
	}{
		{"unknown op", Write{Op: "merge", EntityID: "x", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"empty type", Write{Op: OpCreate, EntityType: "-", EntityID: "x", Data: json.RawMessage(`{}`)}, nil},
		{"type with slash", Write{Op: OpCreate, EntityType: "a/b", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"long type", Write{Op: OpCreate, EntityType: strings.Repeat("t", 65), Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"id with space", Write{Op: OpCreate, EntityID: "a b", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"id with NUL", Write{Op: OpCreate, EntityID: "a\x00b", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"update without id", Write{Op: OpUpdate, Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"array data", Write{Op: OpCreate, Data: json.RawMessage(`[1]`)}, ErrInvalidWrite},
		{"null data", Write{Op: OpCreate, Data: json.RawMessage(`null`)}, ErrInvalidWrite},
		{"no data", Write{Op: OpCreate}, ErrInvalidWrite},
		{"two values", Write{Op: OpCreate, Data: json.RawMessage(`{} {}`)}, ErrInvalidWrite},
		{"oversized data", Write{Op: OpCreate, Data: json.RawMessage(`{"x":"` + strings.Repeat("a", 64) + `"}`)}, ErrInvalidWrite},
		{"grows past the limit once encoded", Write{Op: OpCreate, Data: json.RawMessage(`{"x":"` + strings.Repeat("\u2028", 18) + `"}`)}, ErrInvalidWrite},
		{"update grows past the limit", Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"x":"` + strings.Repeat("a", 55) + `"}`)}, ErrInvalidWrite},
		{"bad operation id", Write{Op: OpCreate, OperationID: "has space", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
		{"create existing", Write{Op: OpCreate, EntityID: "n1", Data: json.RawMessage(`{}`)}, ErrEntityExists},
		{"update missing", Write{Op: OpUpdate, EntityID: "nope", Data: json.RawMessage(`{}`)}, ErrEntityNotFound},
		{"delete missing", Write{Op: OpDelete, EntityID: "nope"}, ErrEntityNotFound},
		{"no account", Write{Op: OpCreate, AccountID: " ", Data: json.RawMessage(`{}`)}, ErrInvalidWrite},
	}
	for _, tt := range tests {
		w := tt.w
		if w.AccountID == "" {
			w.AccountID = "acct"
		}
		if w.EntityType == "" {
			w.EntityType = "note"
		}
		_, err := s.Apply(ctx, w)
		if tt.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	// Only the one valid write ("-" is a valid type) added anything.
	if seq2, _ := s.LastEventSeq(); seq2 != seq+2 {
		t.Fatalf("bad writes appended events: %d -> %d", seq, seq2)
	}
}

func TestUpdateIsMergePatchAndCarriesFullData(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	create(t, s, "n1", `{"title":"a","tags":{"x":1,"y":2},"n":1.50}`)
	r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"title":"b","tags":{"y":null,"z":3}}`)})
	want := `{"n":1.50,"tags":{"x":1,"z":3},"title":"b"}`
	if string(r.Entity.Data) != want || string(r.Operation.Payload) != want {
		t.Fatalf("data = %s, payload = %s, want %s", r.Entity.Data, r.Operation.Payload, want)
	}
	// An object patch onto a missing or non-object member: its nulls
	// delete, they are not stored (RFC 7396).
	r2 := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"title":{"x":null,"y":1},"new":{"a":null}}`)})
	if want := `{"n":1.50,"new":{},"tags":{"x":1,"z":3},"title":{"y":1}}`; string(r2.Entity.Data) != want {
		t.Fatalf("nested nulls: data = %s, want %s", r2.Entity.Data, want)
	}
	if r.Operation.PayloadVersion != 2 || r.Entity.Version != 2 {
		t.Fatalf("versions: op %d entity %d", r.Operation.PayloadVersion, r.Entity.Version)
	}
}

func TestDiscard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fail := func(s *Store, id string) {
		t.Helper()
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != id {
			t.Fatalf("claim %s: %+v %v", id, op, err)
		}
		if err := s.Fail(ctx, id, "w", "validation", "bad", false); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("create removes the entity and its later ops", func(t *testing.T) {
		s, _ := setup(t, Config{NoSync: true})
		c := create(t, s, "n1", `{}`).Operation
		mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"a":1}`)})
		fail(s, c.ID)
		if e, _ := s.GetEntity("acct", "note", "n1"); e.SyncState != SyncFailed || e.SyncError == "" {
			t.Fatalf("entity after fail = %+v", e)
		}
		if err := s.Discard(ctx, c.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetEntity("acct", "note", "n1"); !errors.Is(err, ErrEntityNotFound) {
			t.Fatalf("entity after discard: %v", err)
		}
		if st, _ := s.Stats(); st.Counts[StatePending]+st.Counts[StatePermanentFailed] != 0 {
			t.Fatalf("counts = %v", st.Counts)
		}
	})
	t.Run("delete brings the entity back", func(t *testing.T) {
		s, _ := setup(t, Config{NoSync: true})
		c := create(t, s, "n1", `{}`).Operation
		if op, _ := s.Claim(ctx, "acct", "w", time.Minute); op.ID == c.ID {
			s.Complete(ctx, c.ID, "w", Completion{ServerID: "s1"})
		}
		d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"}).Operation
		fail(s, d.ID)
		if err := s.Discard(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		e, err := s.GetEntity("acct", "note", "n1")
		if err != nil || e.SyncState != SyncSynced || e.Deleted {
			t.Fatalf("entity = %+v, %v", e, err)
		}
	})
}

func TestPurgeAccount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	create(t, s, "n1", `{}`)
	mustApply(t, s, Write{Op: OpCreate, AccountID: "other", EntityID: "n1", Data: json.RawMessage(`{}`)})
	if _, err := s.PurgeAccount(ctx, "acct", false); !errors.Is(err, ErrNotPurgeable) {
		t.Fatalf("purge with unsynced ops: %v", err)
	}
	if err := s.SaveSession(ctx, &Session{AccountID: "acct", AccessToken: "t"}, Event{}); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeAccount(ctx, "acct", true)
	if err != nil || n != 1 {
		t.Fatalf("forced purge = %d, %v", n, err)
	}
	if sess, err := s.LoadSession(); sess != nil || err != nil {
		t.Fatalf("the purged account's session survives: %+v, %v", sess, err)
	}
	if _, err := s.GetEntity("acct", "note", "n1"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("entity after purge: %v", err)
	}
	if _, err := s.GetEntity("other", "note", "n1"); err != nil {
		t.Fatalf("other account's entity after purge: %v", err)
	}
}

func TestSweepAndEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var got []Event
	s, clock := setup(t, Config{NoSync: true, DoneRetention: time.Hour, EventHistory: 5, OnCommit: func(e []Event) { got = append(got, e...) }})
	id := create(t, s, "n1", `{}`).Operation.ID
	create(t, s, "n2", `{}`)
	s.Claim(ctx, "acct", "w", time.Minute)
	if _, err := s.Complete(ctx, id, "w", Completion{ServerID: "s"}); err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: %+v", i, e.Seq, got)
		}
	}
	last := got[len(got)-1]
	if last.Type != EventEntityChanged || last.SyncState != SyncSynced {
		t.Fatalf("last event = %+v", last)
	}
	if ops, events, err := s.Sweep(ctx); err != nil || ops != 0 || events != len(got)-5 {
		t.Fatalf("sweep inside retention = %d ops, %d events, %v (had %d events)", ops, events, err, len(got))
	}
	clock.Advance(time.Hour + time.Second)
	if ops, _, err := s.Sweep(ctx); err != nil || ops != 1 {
		t.Fatalf("sweep after retention = %d ops, %v", ops, err)
	}
	if _, err := s.GetOperation(id); !errors.Is(err, ErrOperationNotFound) {
		t.Fatalf("swept op still there: %v", err)
	}
	evs, oldest, _ := s.Events(0, 0)
	if len(evs) != 5 || oldest != evs[0].Seq || evs[4].Seq != last.Seq {
		t.Fatalf("history after sweep: oldest %d, %d events", oldest, len(evs))
	}
}

// A filter that matches little reads at most MaxListScan rows per call
// and hands back a cursor, so no listing holds a long read transaction.
func TestListScanIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	fill(t, s, MaxListScan+5)
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil { // op 1
		t.Fatal(err)
	}
	if err := s.Fail(ctx, "op00000000", "w", "validation", "x", false); err != nil {
		t.Fatal(err)
	}
	page, next, err := s.ListOperations(ListOptions{State: StatePermanentFailed, Limit: 10})
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("first page: %d items, next %q, %v", len(page), next, err)
	}
	var total int
	for next != "" {
		page, next, err = s.ListOperations(ListOptions{State: StatePermanentFailed, Limit: 10, After: next})
		if err != nil {
			t.Fatal(err)
		}
		total += len(page)
	}
	if total != 0 {
		t.Fatalf("later pages found %d failed operations, want 0", total)
	}
	all, next, err := s.ListEntities("acct", "note", ListOptions{Limit: 5})
	if err != nil || len(all) != 5 || next != all[4].ID {
		t.Fatalf("entities page: %d items, next %q, %v", len(all), next, err)
	}
}

// fillDone writes n operations that have been sent (done), in one
// transaction.
func fillDone(tb testing.TB, s *Store, n int) {
	tb.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		w := &txw{tx: tx, s: s, now: s.now()}
		for i := range n {
			id := fmt.Sprintf("done%08d", i)
			if _, err := w.apply(&Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "d" + id, OperationID: id, Data: json.RawMessage(`{"n":1}`)}); err != nil {
				return err
			}
			op, err := w.loadOp(id)
			if err != nil {
				return err
			}
			if err := w.claim(op, "w", time.Minute); err != nil {
				return err
			}
			if _, err := w.complete(id, Completion{ServerID: "s" + id}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// Listing a state other than done reads the unfinished index: a failed
// operation behind more than MaxListScan done ones is on the first page.
func TestListUnfinishedSkipsDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	fillDone(t, s, MaxListScan+5)
	if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "late", OperationID: "late", Data: json.RawMessage(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, "late", "w", "validation", "x", false); err != nil {
		t.Fatal(err)
	}
	page, next, err := s.ListOperations(ListOptions{State: StatePermanentFailed, Limit: 10})
	if err != nil || len(page) != 1 || page[0].ID != "late" || next != "" {
		t.Fatalf("failed: %d items, next %q, %v", len(page), next, err)
	}
	if page, next, err := s.ListOperations(ListOptions{State: StatePending, Limit: 10}); err != nil || len(page) != 0 || next != "" {
		t.Fatalf("pending: %d items, next %q, %v", len(page), next, err)
	}
	page, next, err = s.ListOperations(ListOptions{State: StateDone, Limit: 10})
	if err != nil || len(page) != 10 || page[0].ID != "done00000000" || next == "" {
		t.Fatalf("done: %d items, next %q, %v", len(page), next, err)
	}
	page, _, err = s.ListOperations(ListOptions{State: StateDone, Limit: 10, After: next})
	if err != nil || len(page) != 10 || page[0].ID != "done00000010" {
		t.Fatalf("done, second page: %d items, %v", len(page), err)
	}
}

// Canonical data keeps '<', '>' and '&' as they are: a create within the
// limit stays within it (HTML-escaped, this one would be 332 bytes), and
// what is stored and sent is what the app wrote; a merged update too.
func TestApplyKeepsHTMLCharacters(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true, MaxDataBytes: 80})
	data := `{"x":"` + strings.Repeat("<>&", 18) + `"}` // 62 bytes
	r := create(t, s, "n1", data)
	e, err := s.EntityRow("acct", "note", "n1")
	if err != nil {
		t.Fatal(err)
	}
	op, err := s.GetOperation(r.Operation.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Data) != data || string(op.Payload) != data {
		t.Errorf("stored %s, to send %s; want %s", e.Data, op.Payload, data)
	}
	u := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"y":"&"}`)})
	if want := `{"x":"` + strings.Repeat("<>&", 18) + `","y":"&"}`; string(u.Entity.Data) != want || string(u.Operation.Payload) != want {
		t.Errorf("after the update: stored %s, sent %s; want %s", u.Entity.Data, u.Operation.Payload, want)
	}
}

// The app may make an entity again under the id of one it deleted, also
// before the delete reached the server: the create queues behind the
// delete, and the entity reads as the new one at once.
func TestCreateAfterLocalDelete(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	ctx := context.Background()
	c1 := create(t, s, "n1", `{"v":1}`)
	d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
	c2 := create(t, s, "n1", `{"v":2}`)
	if c2.Entity.Deleted || string(c2.Entity.Data) != `{"v":2}` || c2.Entity.Version != 3 {
		t.Errorf("re-created entity: %+v", c2.Entity)
	}
	if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: "n1", Data: json.RawMessage(`{}`)}); !errors.Is(err, ErrEntityExists) {
		t.Errorf("a third create of a live entity: %v, want ErrEntityExists", err)
	}
	e, err := s.GetEntity("acct", "note", "n1")
	if err != nil || string(e.Data) != `{"v":2}` {
		t.Fatalf("read after the re-create: %+v, %v", e, err)
	}
	for i, want := range []Operation{c1.Operation, d.Operation, c2.Operation} {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.ID != want.ID {
			t.Fatalf("claim %d: %s (%v), want %s %s", i, op.ID, err, want.Type, want.ID)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-1"}); err != nil {
			t.Fatal(err)
		}
	}
	e, err = s.GetEntity("acct", "note", "n1")
	if err != nil || e.SyncState != SyncSynced || e.Deleted || string(e.Data) != `{"v":2}` || e.ServerID != "srv-1" {
		t.Errorf("after all three went: %+v, %v", e, err)
	}
}

// Discarding a failed create drops what followed it, up to a create of
// the same id made again after a delete: that one stays, with its entity.
func TestDiscardKeepsRecreate(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	ctx := context.Background()
	c1 := create(t, s, "n1", `{"v":1}`)
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || op.ID != c1.Operation.ID {
		t.Fatalf("claim: %v, %v", op.ID, err)
	}
	// Not declined: a delete over a declined create drops it at once
	// (TestDeleteOverDeclined).
	if err := s.Fail(ctx, op.ID, "w", "operation_expired", "too old", false); err != nil {
		t.Fatal(err)
	}
	d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
	c2 := create(t, s, "n1", `{"v":2}`)
	if err := s.Discard(ctx, c1.Operation.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{c1.Operation.ID, d.Operation.ID} {
		if _, err := s.GetOperation(id); !errors.Is(err, ErrOperationNotFound) {
			t.Errorf("operation %s after the discard: %v, want gone", id, err)
		}
	}
	e, err := s.GetEntity("acct", "note", "n1")
	if err != nil || string(e.Data) != `{"v":2}` || e.SyncState != SyncPending {
		t.Fatalf("entity after the discard: %+v, %v", e, err)
	}
	if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != c2.Operation.ID {
		t.Errorf("claim after the discard: %s, %v; want the new create", op.ID, err)
	}
}

// Discarding a failed update goes back to the synced data only when
// nothing else of the entity is queued and the synced operation is still
// kept; otherwise the local data stays.
func TestDiscardUpdateRevert(t *testing.T) {
	t.Parallel()
	s, clock := setup(t, Config{NoSync: true, DoneRetention: time.Hour})
	ctx := context.Background()
	sendNext := func(fail bool) Operation {
		t.Helper()
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if fail {
			err = s.Decline(ctx, op.ID, "w", "validation", "bad")
		} else {
			_, err = s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID})
		}
		if err != nil {
			t.Fatal(err)
		}
		return op
	}

	// An update queued behind the failed one carries its change: no revert.
	create(t, s, "a", `{"v":1}`)
	sendNext(false)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"v":2}`)})
	failed := sendNext(true)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"w":3}`)})
	// (the update renewed the declined head; fail it again)
	failed = sendNext(true)
	if err := s.Discard(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	if got := entityData(t, s, "a"); got != `{"v":2,"w":3}` {
		t.Errorf("a after the discard with an update behind: %s", got)
	}

	// The synced create was swept: nothing to go back to.
	create(t, s, "b", `{"v":1}`)
	for {
		if op := sendNext(false); op.EntityID == "b" {
			break
		}
	}
	clock.Advance(2 * time.Hour)
	if _, _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "b", Data: json.RawMessage(`{"v":2}`)})
	if err := s.Discard(ctx, sendNext(true).ID); err != nil {
		t.Fatal(err)
	}
	if got := entityData(t, s, "b"); got != `{"v":2}` {
		t.Errorf("b after the discard with its synced op swept: %s", got)
	}
}

// A discard reverts only an update the server refused, and only to this
// entity's own synced data: not after an update that may have been
// applied, not to an operation that took a swept operation's id.
func TestDiscardRevertOnlyWhenKnown(t *testing.T) {
	t.Parallel()
	s, clock := setup(t, Config{NoSync: true, DoneRetention: time.Hour})
	ctx := context.Background()
	next := func() Operation {
		t.Helper()
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return op
	}
	complete := func() {
		t.Helper()
		if _, err := s.Complete(ctx, next().ID, "w", Completion{ServerID: "srv"}); err != nil {
			t.Fatal(err)
		}
	}

	// An update that may have been applied (a 2xx the daemon could not
	// take, then given up): its discard keeps the data, and a later
	// refused update's discard no longer reverts past it.
	create(t, s, "a", `{"v":1}`)
	complete()
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"v":2}`)})
	op := next()
	if err := s.Fail(ctx, op.ID, "w", "invalid_response", "no id", true); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if got := entityData(t, s, "a"); got != `{"v":2}` {
		t.Errorf("a after discarding a maybe applied update: %s", got)
	}
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"v":3}`)})
	op = next()
	if err := s.Decline(ctx, op.ID, "w", "validation", "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if got := entityData(t, s, "a"); got != `{"v":3}` {
		t.Errorf("a reverted past an update the server may hold: %s", got)
	}

	// b synced under key K; K swept, then taken by c's create: b's
	// refused update is not reverted to c's data.
	mustApply(t, s, Write{Op: OpCreate, EntityID: "b", OperationID: "K", Data: json.RawMessage(`{"b":1}`)})
	complete()
	clock.Advance(2 * time.Hour)
	if _, _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Write{Op: OpCreate, EntityID: "c", OperationID: "K", Data: json.RawMessage(`{"secret":"c"}`)})
	complete()
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "b", Data: json.RawMessage(`{"b":2}`)})
	op = next()
	if err := s.Decline(ctx, op.ID, "w", "validation", "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if got := entityData(t, s, "b"); got != `{"b":2}` {
		t.Errorf("b after its synced op's id was taken by c: %s", got)
	}
}

// entityData is the stored data of acct's note id.
func entityData(t *testing.T, s *Store, id string) string {
	t.Helper()
	e, err := s.EntityRow("acct", "note", id)
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Data)
}

// Buckets filled in key order (sequence numbers, times) keep their pages
// full through creates and a drain. bbolt's default split, at half a
// page, leaves them about half empty: 0.44-0.50 of each leaf in use here.
func TestAppendOrderedBucketsArePacked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	for range 2000 {
		if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", Data: json.RawMessage(`{"title":"a note of some length","done":false}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if errors.Is(err, ErrNoReady) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID}); err != nil {
			t.Fatal(err)
		}
	}
	s.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketOps, bucketDone, bucketEvents} {
			st := tx.Bucket(name).Stats()
			if used := float64(st.LeafInuse) / float64(st.LeafAlloc); used < 0.7 {
				t.Errorf("%s: %d keys on %d leaf pages, %.2f of them in use", name, st.KeyN, st.LeafPageN, used)
			}
		}
		return nil
	})
}

// A create the server answered with a record holding other data
// (Completion.OtherData) queues an update of the entity's data behind
// whatever of it is queued, with a version above the server's; not when
// the entity is deleted locally, and only once.
func TestCompleteWithOtherDataQueuesUpdate(t *testing.T) {
	t.Parallel()
	var events []Event // OnCommit runs on the writing goroutine: this one
	s, _ := setup(t, Config{NoSync: true, OnCommit: func(es []Event) { events = append(events, es...) }})
	ctx := context.Background()
	claim := func(wantID string) {
		t.Helper()
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.ID != wantID {
			t.Fatalf("claimed %s, %v; want %s", op.ID, err, wantID)
		}
	}
	other := Completion{ServerID: "srv", OtherData: true, ServerPayloadVersion: 7}

	c := create(t, s, "a", `{"v":1}`).Operation
	u := mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"w":2}`)}).Operation
	claim(c.ID)
	events = nil
	for range 2 { // the second completion is a redo and changes nothing
		if _, err := s.Complete(ctx, c.ID, "w", other); err != nil {
			t.Fatal(err)
		}
	}
	e, err := s.EntityRow("acct", "note", "a")
	if err != nil {
		t.Fatal(err)
	}
	// The entity stays pending, but its version changed: apps hear of it.
	if n := countEvents(events, EventEntityChanged, e.LastOperationID); n != 1 {
		t.Errorf("%d entity.changed events naming the follow-up, want 1: %+v", n, events)
	}
	if e.Version != 8 || e.LastOperationID == u.ID || e.SyncState != SyncPending || e.SyncedOperationID != "" || e.ServerID != "srv" {
		t.Fatalf("entity after the completion: %+v", e)
	}
	ops, _, err := s.ListOperations(ListOptions{State: StatePending})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops[0].ID != u.ID || ops[1].ID != e.LastOperationID {
		t.Fatalf("pending %+v, want the app's update then the follow-up", ops)
	}
	f := ops[1]
	if f.Type != OpUpdate || f.PayloadVersion != 8 || string(f.Payload) != `{"v":1,"w":2}` || f.Key() != f.ID {
		t.Fatalf("follow-up %+v", f)
	}
	claim(u.ID)
	if _, err := s.Complete(ctx, u.ID, "w", Completion{ServerID: "srv"}); err != nil {
		t.Fatal(err)
	}
	claim(f.ID)
	if _, err := s.Complete(ctx, f.ID, "w", Completion{ServerID: "srv"}); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.EntityRow("acct", "note", "a"); e.SyncState != SyncSynced || e.SyncedOperationID != f.ID {
		t.Fatalf("entity after the follow-up: %+v", e)
	}

	// Deleted locally: nothing to send but the delete.
	c = create(t, s, "b", `{"v":1}`).Operation
	d := mustApply(t, s, Write{Op: OpDelete, EntityID: "b"}).Operation
	claim(c.ID)
	if _, err := s.Complete(ctx, c.ID, "w", other); err != nil {
		t.Fatal(err)
	}
	if ops, _, _ := s.ListOperations(ListOptions{State: StatePending}); len(ops) != 1 || ops[0].ID != d.ID {
		t.Fatalf("pending after a create with a delete behind: %+v", ops)
	}
	// The server does not hold the create's data: a discarded delete must
	// not bring it back as what the server holds.
	if e, err := s.EntityRow("acct", "note", "b"); err != nil || e.SyncedOperationID != "" {
		t.Fatalf("entity b: syncedOperationId %q, %v; want none", e.SyncedOperationID, err)
	}
}

func countEvents(events []Event, typ, opID string) int {
	n := 0
	for _, ev := range events {
		if ev.Type == typ && ev.OperationID == opID {
			n++
		}
	}
	return n
}

// A delete of an entity whose head the server declined does not wait
// behind it: nothing of the partition reached the server, so its
// operations go. Over a create of an id the server never answered for,
// the delete is done at once and the entity goes; otherwise the delete is
// sent first. A head that was not declined keeps the delete behind it.
func TestDeleteOverDeclined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	declineNext := func(t *testing.T, s *Store, want string) {
		t.Helper()
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.ID != want {
			t.Fatalf("claim: %s, %v; want %s", op.ID, err, want)
		}
		if err := s.Decline(ctx, op.ID, "w", "validation", "bad"); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(t *testing.T, s *Store, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, err := s.GetOperation(id); !errors.Is(err, ErrOperationNotFound) {
				t.Errorf("operation %s after the delete: %v, want gone", id, err)
			}
		}
	}

	t.Run("declined create", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, Config{NoSync: true})
		c := create(t, s, "n1", `{"v":1}`)
		declineNext(t, s, c.Operation.ID)
		u := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"v":2}`)})
		// The update renewed the create; it is declined again.
		declineNext(t, s, c.Operation.ID)
		u2 := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"v":3}`)})
		declineNext(t, s, c.Operation.ID)

		w := Write{Op: OpDelete, AccountID: "acct", EntityType: "note", EntityID: "n1", OperationID: "del-1", RequestFingerprint: "fp"}
		d, err := s.Apply(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if d.Operation.State != StateDone || d.Operation.AttemptCount != 0 || !d.Entity.Deleted || d.Entity.SyncState != SyncSynced {
			t.Fatalf("delete: op %s attempts %d, entity deleted=%v %s; want done unsent, deleted synced", d.Operation.State, d.Operation.AttemptCount, d.Entity.Deleted, d.Entity.SyncState)
		}
		gone(t, s, c.Operation.ID, u.Operation.ID, u2.Operation.ID)
		if _, err := s.GetEntity("acct", "note", "n1"); !errors.Is(err, ErrEntityNotFound) {
			t.Errorf("entity after the delete: %v, want gone", err)
		}
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
			t.Errorf("claim after the delete: %s, %v; want nothing", op.ID, err)
		}
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Counts[StateDone] != 1 || st.Counts[StatePermanentFailed] != 0 || st.Counts[StatePending] != 0 {
			t.Errorf("counts after the delete: %v", st.Counts)
		}
		// The app's Idempotency-Key replay finds the delete.
		if r, err := s.Apply(ctx, w); err != nil || !r.Replayed || r.Operation.ID != "del-1" || r.Operation.State != StateDone {
			t.Errorf("replay: %+v, %v", r.Operation, err)
		}
		// The id is free for a new create, sent as one.
		c2 := create(t, s, "n1", `{"v":4}`)
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != c2.Operation.ID || op.Type != OpCreate {
			t.Errorf("claim after the new create: %s %s, %v", op.ID, op.Type, err)
		}
		mustCheck(t, s)
	})

	// A create refused as a conflict with the record the server holds
	// under its id (a re-created id that another device brought back),
	// then deleted in an ordered batch (no resolution of the conflict):
	// the server holds the entity live, so the delete goes to that record,
	// made on the version the conflict showed, instead of being done at
	// once with the server's record left live (found by the convergence
	// checker: the record stayed on the server and missing on the device).
	t.Run("create refused for a live record", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, Config{NoSync: true})
		x := create(t, s, "x", `{}`)
		c := create(t, s, "n1", `{"v":1}`)
		for _, want := range []string{x.Operation.ID, c.Operation.ID} {
			op, err := s.Claim(ctx, "acct", "w", time.Minute)
			if err != nil || op.ID != want {
				t.Fatalf("claim: %s, %v; want %s", op.ID, err, want)
			}
			if op.ID == x.Operation.ID {
				continue // x stays sending: what the delete is ordered after is not done
			}
			if err := s.Conflict(ctx, op.ID, "w", "version_conflict", "taken", ServerState{ID: "srv-1", Version: 6, Data: json.RawMessage(`{"v":9}`)}); err != nil {
				t.Fatal(err)
			}
		}
		d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1", After: x.Operation.ID})
		if d.Operation.State == StateDone {
			t.Fatal("the delete was done at once while the server holds the record live")
		}
		gone(t, s, c.Operation.ID)
		e, err := s.EntityRow("acct", "note", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if e.ServerID != "srv-1" || e.ServerVersion != 6 || !e.Deleted {
			t.Fatalf("entity: server id %q version %d deleted %v; want srv-1, 6, deleted", e.ServerID, e.ServerVersion, e.Deleted)
		}
		mustCheck(t, s)
	})

	t.Run("declined update", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, Config{NoSync: true})
		create(t, s, "n1", `{"v":1}`)
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-1"}); err != nil {
			t.Fatal(err)
		}
		u := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n1", Data: json.RawMessage(`{"v":2}`)})
		declineNext(t, s, u.Operation.ID)
		d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
		gone(t, s, u.Operation.ID)
		if d.Operation.State != StatePending || d.Entity.SyncState != SyncPending {
			t.Fatalf("delete: op %s, entity %s; want both pending", d.Operation.State, d.Entity.SyncState)
		}
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != d.Operation.ID {
			t.Fatalf("claim after the delete: %s, %v; want the delete", op.ID, err)
		}
		if _, err := s.Complete(ctx, d.Operation.ID, "w", Completion{ServerID: "srv-1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetEntity("acct", "note", "n1"); !errors.Is(err, ErrEntityNotFound) {
			t.Errorf("entity after the delete reached the server: %v, want gone", err)
		}
		mustCheck(t, s)
	})

	t.Run("declined create over a record the server held", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, Config{NoSync: true})
		create(t, s, "n1", `{"v":1}`)
		mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
		c := create(t, s, "n1", `{"v":2}`) // made again behind the delete
		for range 2 {                      // the first create and the delete reach the server
			op, err := s.Claim(ctx, "acct", "w", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-1"}); err != nil {
				t.Fatal(err)
			}
		}
		declineNext(t, s, c.Operation.ID)
		d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
		gone(t, s, c.Operation.ID)
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != d.Operation.ID {
			t.Fatalf("claim after the delete: %s, %v; want the delete, sent", op.ID, err)
		}
		mustCheck(t, s)
	})

	t.Run("failed, not declined", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, Config{NoSync: true})
		c := create(t, s, "n1", `{"v":1}`)
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// The create may have been applied: the delete must follow it.
		if err := s.Fail(ctx, op.ID, "w", "validation", "bad", true); err != nil {
			t.Fatal(err)
		}
		d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
		if d.Operation.State != StatePending || d.Entity.SyncState != SyncFailed {
			t.Fatalf("delete: op %s, entity %s; want pending behind the failed create", d.Operation.State, d.Entity.SyncState)
		}
		if got, err := s.GetOperation(c.Operation.ID); err != nil || got.State != StatePermanentFailed {
			t.Errorf("create after the delete: %s, %v; want still failed", got.State, err)
		}
		if op, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
			t.Errorf("claim: %s, %v; want nothing ready", op.ID, err)
		}
		mustCheck(t, s)
	})
}

// Config.MergeableTypes: an update or delete of a mergeable entity
// supersedes the update queued just before it when that one was never
// sent. Nothing else is merged.
func TestMergeableTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true, MergeableTypes: []string{"note"}})
	update := func(typ, id, data string) Result {
		t.Helper()
		return mustApply(t, s, Write{Op: OpUpdate, EntityType: typ, EntityID: id, Data: json.RawMessage(data)})
	}
	ids := func(typ, id string) []string {
		t.Helper()
		var out []string
		err := s.db.View(func(tx *bolt.Tx) error {
			ops, err := (&txw{tx: tx, s: s}).partitionOps("acct", typ, id)
			for _, op := range ops {
				out = append(out, op.ID)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// A create is never merged, and an update does not supersede it.
	c := create(t, s, "n1", `{"v":0}`)
	u1 := update("note", "n1", `{"v":1}`)
	u2 := update("note", "n1", `{"v":2}`)
	if got, want := ids("note", "n1"), []string{c.Operation.ID, u2.Operation.ID}; !slices.Equal(got, want) {
		t.Fatalf("queued after create, update, update: %v, want %v", got, want)
	}
	op, err := s.GetOperation(u1.Operation.ID)
	if err != nil || op.State != StateDone || op.MergedInto != u2.Operation.ID || op.AttemptCount != 0 {
		t.Fatalf("superseded update: %s mergedInto %q attempts %d, %v", op.State, op.MergedInto, op.AttemptCount, err)
	}
	// Its id still answers the app's replay, with its first answer.
	if r, err := s.Apply(ctx, Write{Op: OpUpdate, AccountID: "acct", EntityType: "note", EntityID: "n1", OperationID: u1.Operation.ID, Data: json.RawMessage(`{"v":1}`)}); err != nil || !r.Replayed {
		t.Fatalf("replay of the superseded update: %+v, %v", r.Operation, err)
	}

	// An update being sent is not merged; the one queued behind it is.
	for range 2 { // the create, then u2
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if op.ID == c.Operation.ID {
			if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-1"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	u3 := update("note", "n1", `{"v":3}`)
	u4 := update("note", "n1", `{"v":4}`)
	if got, want := ids("note", "n1"), []string{u2.Operation.ID, u4.Operation.ID}; !slices.Equal(got, want) {
		t.Fatalf("queued behind a sending update: %v, want %v", got, want)
	}
	// A delete supersedes the unsent update too.
	d := mustApply(t, s, Write{Op: OpDelete, EntityID: "n1"})
	if got, want := ids("note", "n1"), []string{u2.Operation.ID, d.Operation.ID}; !slices.Equal(got, want) {
		t.Fatalf("queued after the delete: %v, want %v", got, want)
	}
	if op, err := s.GetOperation(u4.Operation.ID); err != nil || op.MergedInto != d.Operation.ID {
		t.Errorf("update superseded by the delete: mergedInto %q, %v", op.MergedInto, err)
	}
	if op, err := s.GetOperation(u3.Operation.ID); err != nil || op.MergedInto != u4.Operation.ID {
		t.Errorf("u3: mergedInto %q, %v", op.MergedInto, err)
	}

	// A type that is not mergeable keeps every write.
	p := mustApply(t, s, Write{Op: OpCreate, EntityType: "payment", EntityID: "p1", Data: json.RawMessage(`{"v":0}`)})
	p1 := update("payment", "p1", `{"v":1}`)
	p2 := update("payment", "p1", `{"v":2}`)
	if got, want := ids("payment", "p1"), []string{p.Operation.ID, p1.Operation.ID, p2.Operation.ID}; !slices.Equal(got, want) {
		t.Fatalf("payment queue: %v, want %v", got, want)
	}
	mustCheck(t, s)

	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Config{MergeableTypes: []string{"bad type!"}}); err == nil {
		t.Error("Open took an invalid mergeable type")
	}
}

// A write whose data CanonicalData made (Write.Canonical, as the local
// API sends them) is stored as the same bytes as the app's data encoded
// by the store, and is still checked.
func TestCanonicalWrite(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	raw := json.RawMessage(` {"b":[1, 2.50],"a":"<é>","c":{"z":null,"y":1e3}} `)
	c, err := CanonicalData(raw)
	if err != nil {
		t.Fatal(err)
	}
	plain := mustApply(t, s, Write{Op: OpCreate, EntityID: "plain", Data: raw})
	given := mustApply(t, s, Write{Op: OpCreate, EntityID: "given", Data: c, Canonical: true})
	if string(plain.Entity.Data) != string(c) || string(given.Entity.Data) != string(c) || string(given.Operation.Payload) != string(c) {
		t.Fatalf("stored %s and %s, want %s for both", plain.Entity.Data, given.Entity.Data, c)
	}
	for _, bad := range []string{`{"a":1,"a":2}`, `[1]`, `{"a":`} {
		if _, err := s.Apply(context.Background(), Write{Op: OpCreate, AccountID: "acct", EntityType: "note", Data: json.RawMessage(bad), Canonical: true}); !errors.Is(err, ErrInvalidWrite) {
			t.Errorf("canonical data %s: %v, want ErrInvalidWrite", bad, err)
		}
	}
}
