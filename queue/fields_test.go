package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// fieldsSetup makes note n synced at server version 1 with data, then
// queues the app's patch: the entity is pending, its update naming the
// patch's fields.
func fieldsSetup(t *testing.T, data, patch string) *Store {
	t.Helper()
	s, _ := setup(t, Config{})
	create(t, s, "n", data)
	sendAndComplete(t, s, "srv-n", 1)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(patch)})
	return s
}

// TestUpdateCarriesItsFields: an update names the fields its merge patch
// changes; a superseding unsent update names both.
func TestUpdateCarriesItsFields(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{MergeableTypes: []string{"note"}})
	create(t, s, "n", `{"title":"a","address":{"city":"x","zip":"1"}}`)
	sendAndComplete(t, s, "srv-n", 1)
	r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"address":{"city":"y"},"gone":null}`)})
	if want := []string{"/address/city", "/gone"}; !slices.Equal(r.Operation.Paths, want) {
		t.Fatalf("paths %q, want %q", r.Operation.Paths, want)
	}
	r = mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"title":"b"}`)})
	if want := []string{"/address/city", "/gone", "/title"}; !slices.Equal(r.Operation.Paths, want) {
		t.Fatalf("superseding update's paths %q, want %q", r.Operation.Paths, want)
	}
	op, err := s.Claim(context.Background(), "acct", "w", time.Minute)
	if err != nil || op.ID != r.Operation.ID || len(op.Paths) != 3 {
		t.Fatalf("claimed %+v %v: the paths are stored", op, err)
	}
}

// TestPulledFieldsShowBesidePendingEdit: a pulled change to other fields
// shows at once; the edit's own field stays local; the record stays
// beside, and the edit still goes out on its base.
func TestPulledFieldsShowBesidePendingEdit(t *testing.T) {
	t.Parallel()
	s := fieldsSetup(t, `{"title":"a","done":false}`, `{"title":"mine"}`)
	var ev []Event
	s.cfg.OnCommit = func(es []Event) { ev = append(ev, es...) }
	applyPage(t, s, "", "c1", true, change("n", 2, `{"title":"theirs","done":true,"tag":"x"}`))
	e, _ := entity(t, s, "n")
	if string(e.Data) != `{"done":true,"tag":"x","title":"mine"}` || e.SyncState != SyncPending || e.ServerVersion != 1 ||
		e.Server == nil || e.Server.Version != 2 {
		t.Fatalf("after the pull: %s %+v (server %+v)", e.Data, e, e.Server)
	}
	found := false
	for _, x := range ev {
		if x.Type == EventEntityChanged && string(x.Data) == `{"origin":"remote","paths":["/done","/tag"]}` {
			found = true
		}
	}
	if !found {
		t.Errorf("no entity.changed naming the merged fields in %+v", ev)
	}
	op, err := s.Claim(context.Background(), "acct", "w", time.Minute)
	if err != nil || !slices.Equal(op.Paths, []string{"/title"}) {
		t.Fatalf("the edit: %+v %v", op, err)
	}
}

// TestAnswerWithMergedRecordIsTaken: a merging server's answer holds
// another device's fields: the entity takes them, its later edits laid
// over, and is not marked as holding the op's payload.
func TestAnswerWithMergedRecordIsTaken(t *testing.T) {
	t.Parallel()
	s := fieldsSetup(t, `{"title":"a","done":false}`, `{"title":"mine"}`)
	ctx := context.Background()
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A later edit while the first is in flight.
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"note":"later"}`)})
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-n", ServerVersion: 3,
		Data: json.RawMessage(`{"title":"mine","done":true}`)}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if string(e.Data) != `{"done":true,"note":"later","title":"mine"}` || e.ServerVersion != 3 || e.SyncState != SyncPending {
		t.Fatalf("after the merged answer: %s %+v", e.Data, e)
	}
	sendAndComplete(t, s, "srv-n", 4)
	if e, _ = entity(t, s, "n"); e.SyncState != SyncSynced || e.SyncedOperationID == "" {
		t.Fatalf("after the later edit: %+v", e)
	}
	// A last-writer-wins answer (the data sent) changes nothing.
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"done":false}`)})
	op, _ = s.Claim(ctx, "acct", "w", time.Minute)
	if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-n", ServerVersion: 5, Data: op.Payload}); err != nil {
		t.Fatal(err)
	}
	if e, _ = entity(t, s, "n"); string(e.Data) != `{"done":false,"note":"later","title":"mine"}` || e.SyncedOperationID != op.ID {
		t.Fatalf("after a whole-record answer: %s %+v", e.Data, e)
	}
}

// fieldConflict makes n's update refused by a merging server: /title
// changed on both sides since version 1.
func fieldConflict(t *testing.T) *Store {
	t.Helper()
	s := fieldsSetup(t, `{"title":"a","done":false,"tag":"t"}`, `{"title":"mine","tag":"mytag"}`)
	ctx := context.Background()
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	srv := ServerState{ID: "srv-n", Version: 3, Data: json.RawMessage(`{"title":"theirs","done":true,"tag":"t"}`),
		Paths: []string{"/title"}, Base: json.RawMessage(`{"title":"a","done":false,"tag":"t"}`)}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "fields changed", srv); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConflictFieldByField: the conflict reads as its fields, each with
// its base, local and server values; resolving per field keeps this
// device's other fields and sends the result on the server's version.
func TestConflictFieldByField(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldConflict(t)
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Conflict == nil || len(e.Conflict.Paths) != 1 {
		t.Fatalf("conflict: %+v", e)
	}
	if p := e.Conflict.Paths[0]; p.Path != "/title" || string(p.Base) != `"a"` || !p.BaseKnown || string(p.Local) != `"mine"` || string(p.Server) != `"theirs"` {
		t.Fatalf("conflict path %+v (base %s local %s server %s)", p, p.Base, p.Local, p.Server)
	}
	if l, _, err := s.ListEntities("acct", "note", ListOptions{SyncState: SyncConflict}); err != nil || len(l) != 1 || l[0].Conflict == nil {
		t.Fatalf("listed %+v %v", l, err)
	}

	for _, bad := range []Resolution{
		{Paths: map[string]string{}},                                     // /title without a side
		{Paths: map[string]string{"/title": "local", "/done": "server"}}, // /done is not in conflict
		{Paths: map[string]string{"/title": "mine"}},                     // no such side
		{Take: TakeLocal, Paths: map[string]string{"/title": "local"}},   // two at once
		{Data: json.RawMessage(`[1]`)},                                   // not an object
		{},                                                               // nothing
	} {
		if _, _, err := s.ResolveWith(ctx, "acct", "note", "n", bad, ""); !errors.Is(err, ErrInvalidWrite) {
			t.Errorf("resolve %+v: %v, want ErrInvalidWrite", bad, err)
		}
	}

	e, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Paths: map[string]string{"/title": "server"}}, "")
	if err != nil || e.SyncState != SyncPending || string(e.Data) != `{"done":true,"tag":"mytag","title":"theirs"}` || e.ServerVersion != 3 {
		t.Fatalf("resolve per field: %s %+v %v", e.Data, e, err)
	}
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || op.Type != OpUpdate || !slices.Equal(op.Paths, []string{"/tag"}) || string(op.Payload) != string(e.Data) {
		t.Fatalf("the resolution's update: %+v %v", op, err)
	}
}

// TestTakeLocalOfFieldConflictKeepsOtherDevicesFields: take local sends
// this device's fields over the server's record, not the whole local
// data; data resolves with the app's merge; a result equal to the
// server's record is take server.
func TestTakeLocalOfFieldConflictKeepsOtherDevicesFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldConflict(t)
	e, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Take: TakeLocal}, "")
	if err != nil || string(e.Data) != `{"done":true,"tag":"mytag","title":"mine"}` {
		t.Fatalf("take local: %s %+v %v", e.Data, e, err)
	}
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	if !slices.Equal(op.Paths, []string{"/tag", "/title"}) {
		t.Fatalf("take local's paths %q", op.Paths)
	}

	s = fieldConflict(t)
	e, _, err = s.ResolveWith(ctx, "acct", "note", "n", Resolution{Data: json.RawMessage(`{"title":"both","done":true}`)}, "")
	if err != nil || string(e.Data) != `{"done":true,"title":"both"}` {
		t.Fatalf("data: %s %v", e.Data, err)
	}
	op, _ = s.Claim(ctx, "acct", "w", time.Minute)
	if !slices.Equal(op.Paths, []string{"/tag", "/title"}) {
		t.Fatalf("data's paths %q: the fields that differ from the server's record", op.Paths)
	}

	s = fieldConflict(t)
	e, _, err = s.ResolveWith(ctx, "acct", "note", "n", Resolution{Data: json.RawMessage(`{"title":"theirs","done":true,"tag":"t"}`)}, "")
	if err != nil || e.SyncState != SyncSynced || e.ServerVersion != 3 {
		t.Fatalf("data equal to the server's record: %+v %v", e, err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("nothing to send: %v", err)
	}
}

// TestWholeRecordConflictRefusesPaths: a conflict the server named no
// fields of resolves whole only.
func TestWholeRecordConflictRefusesPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"title":"a"}`, `{"title":"mine"}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "changed", ServerState{Version: 2, Data: json.RawMessage(`{"title":"theirs"}`)}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Conflict != nil {
		t.Fatalf("whole-record conflict: %+v", e)
	}
	if _, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Paths: map[string]string{"/title": "local"}}, ""); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("paths on a whole-record conflict: %v", err)
	}
	if e, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Take: TakeLocal}, ""); err != nil || string(e.Data) != `{"title":"mine"}` {
		t.Fatalf("take local: %s %v", e.Data, err)
	}
	if op, _ := s.Claim(ctx, "acct", "w", time.Minute); op.Paths != nil {
		t.Fatalf("a whole-record take local names no fields: %q", op.Paths)
	}
}

// TestCreateConflictResolvesOnTheServersRecord: a create refused on a
// field (another device created the id with another value) keeps the
// record's id; take local updates that record with this device's fields.
func TestCreateConflictResolvesOnTheServersRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	create(t, s, "n", `{"title":"mine","color":"red"}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	srv := ServerState{ID: "srv-other", Version: 1, Data: json.RawMessage(`{"title":"theirs","done":true}`), Paths: []string{"/title"}}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "title", srv); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.Conflict == nil || e.Conflict.Paths[0].BaseKnown || string(e.Conflict.Paths[0].Local) != `"mine"` {
		t.Fatalf("create conflict: %+v", e.Conflict)
	}
	e, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Take: TakeLocal}, "")
	if err != nil || e.ServerID != "srv-other" || e.ServerVersion != 1 || string(e.Data) != `{"color":"red","done":true,"title":"mine"}` {
		t.Fatalf("take local: %s %+v %v", e.Data, e, err)
	}
	op, _ = s.Claim(ctx, "acct", "w", time.Minute)
	if op.Type != OpUpdate || !slices.Equal(op.Paths, []string{"/color", "/title"}) {
		t.Fatalf("the update: %+v", op)
	}
}

// TestConflictAtTheBaseVersionKeepsItsVersion: a merging server may
// refuse a change at the very version it was based on (a create of an id
// another device made, resent after the app edited it). The record
// beside stays at its real version, so taking it leaves the next version
// to the feed (a made-up version one past had hidden it: the in-process
// convergence model found this).
func TestConflictAtTheBaseVersionKeepsItsVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"c":4,"by":"B"}`, `{"by":"A"}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	srv := ServerState{ID: "srv-n", Version: 1, Data: json.RawMessage(`{"c":4,"by":"B"}`), Paths: []string{"/by"}}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "by", srv); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Version != 1 || string(e.Server.Data) != `{"by":"B","c":4}` {
		t.Fatalf("conflict at the base version: %+v (server %+v)", e, e.Server)
	}
	if e, _, err := s.Resolve(ctx, "acct", "note", "n", TakeServer, ""); err != nil || e.ServerVersion != 1 || string(e.Data) != `{"by":"B","c":4}` {
		t.Fatalf("take server: %+v %v", e, err)
	}
	applyPage(t, s, "", "c1", true, change("n", 2, `{"c":4,"by":"B","u":35}`))
	if e, _ := entity(t, s, "n"); e.ServerVersion != 2 || string(e.Data) != `{"by":"B","c":4,"u":35}` {
		t.Fatalf("the next version from the feed: %s %+v", e.Data, e)
	}
}

// TestConflictAfterThePullKeepsItsFields: the pull brought the record
// before the refusal did: the refusal still names the fields.
func TestConflictAfterThePullKeepsItsFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"title":"a","done":false}`, `{"title":"mine"}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	applyPage(t, s, "", "c1", true, change("n", 2, `{"title":"theirs","done":true}`))
	srv := ServerState{ID: "srv-n", Version: 2, Data: json.RawMessage(`{"title":"theirs","done":true}`), Paths: []string{"/title"},
		Base: json.RawMessage(`{"title":"a","done":false}`)}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "title", srv); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.Conflict == nil || len(e.Conflict.Paths) != 1 || string(e.Conflict.Paths[0].Base) != `"a"` {
		t.Fatalf("conflict after the pull: %+v", e.Conflict)
	}
}

// TestUpdatePathsWithinLimits: an empty patch changes no field (not the
// whole data); a patch naming more fields, or longer ones, than a server
// takes goes as the whole data instead of failing for good on a 400.
func TestUpdatePathsWithinLimits(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{MergeableTypes: []string{"note"}})
	create(t, s, "n", `{"a":1}`)
	sendAndComplete(t, s, "srv-n", 1)
	if r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{}`)}); r.Operation.Paths == nil || len(r.Operation.Paths) != 0 {
		t.Fatalf("empty patch: paths %#v, want an empty list", r.Operation.Paths)
	}
	big := func(from, n int) json.RawMessage {
		m := map[string]int{}
		for i := from; i < from+n; i++ {
			m[fmt.Sprintf("f%d", i)] = i
		}
		b, _ := json.Marshal(m)
		return b
	}
	// Two unsent edits of 600 fields each: merged, 1,200: the whole data.
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: big(0, 600)})
	if r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: big(600, 600)}); r.Operation.Paths != nil {
		t.Fatalf("1,200 fields: %d paths, want none (the whole data)", len(r.Operation.Paths))
	}
	long := json.RawMessage(`{"` + strings.Repeat("x", 1100) + `":1}`)
	s2, _ := setup(t, Config{})
	create(t, s2, "n", `{"a":1}`)
	sendAndComplete(t, s2, "srv-n", 1)
	if r := mustApply(t, s2, Write{Op: OpUpdate, EntityID: "n", Data: long}); r.Operation.Paths != nil {
		t.Fatalf("a 1,100-byte path: %q, want none (the whole data)", r.Operation.Paths)
	}
}

// TestConflictFieldsOutliveANewerVersion: a pull that brings a newer
// version of the record during a conflict field by field keeps the
// fields (and the base); a field of this device's change that the newer
// version changed too joins them.
func TestConflictFieldsOutliveANewerVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldConflict(t) // /title in conflict; this device changed /title and /tag
	applyPage(t, s, "", "c1", true, change("n", 4, `{"title":"theirs","done":true,"tag":"t","n":5}`))
	e, _ := entity(t, s, "n")
	if e.SyncState != SyncConflict || e.Conflict == nil || len(e.Conflict.Paths) != 1 || e.Conflict.Paths[0].Path != "/title" ||
		string(e.Conflict.Paths[0].Base) != `"a"` || e.Server.Version != 4 || string(e.Data) != `{"done":true,"n":5,"tag":"mytag","title":"mine"}` {
		t.Fatalf("after a newer version of another field: %s %+v %+v", e.Data, e.Conflict, e.Server)
	}
	applyPage(t, s, "c1", "c2", true, change("n", 5, `{"title":"theirs","done":true,"tag":"other","n":5}`))
	if e, _ = entity(t, s, "n"); e.Conflict == nil || len(e.Conflict.Paths) != 2 || e.Conflict.Paths[0].Path != "/tag" {
		t.Fatalf("after a newer version of this device's other field: %+v", e.Conflict)
	}
	e, _, err := s.ResolveWith(ctx, "acct", "note", "n", Resolution{Paths: map[string]string{"/title": "local", "/tag": "server"}}, "")
	if err != nil || string(e.Data) != `{"done":true,"n":5,"tag":"other","title":"mine"}` || e.ServerVersion != 5 {
		t.Fatalf("resolve: %s %+v %v", e.Data, e, err)
	}
}

// TestDeleteConflictIsWholeRecord: a refused delete's conflict shows no
// fields to choose from: it is of the whole record.
func TestDeleteConflictIsWholeRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{})
	create(t, s, "n", `{"title":"t0"}`)
	sendAndComplete(t, s, "srv-n", 1)
	mustApply(t, s, Write{Op: OpDelete, EntityID: "n"})
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	srv := ServerState{ID: "srv-n", Version: 2, Data: json.RawMessage(`{"title":"B"}`), Paths: []string{"/title"}, Base: json.RawMessage(`{"title":"t0"}`)}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "changed", srv); err != nil {
		t.Fatal(err)
	}
	l, _, err := s.ListEntities("acct", "note", ListOptions{SyncState: SyncConflict})
	if err != nil || len(l) != 1 || l[0].Conflict != nil || !l[0].Deleted {
		t.Fatalf("a delete's conflict: %+v %v", l, err)
	}
}

// TestRefusalAfterThePullMovedOnKeepsItsFields: the pull kept a newer
// version before the refusal (of an older one) is recorded: the conflict
// is still field by field.
func TestRefusalAfterThePullMovedOnKeepsItsFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"a":"0","b":"0"}`, `{"a":"B1"}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	applyPage(t, s, "", "c1", true, change("n", 3, `{"a":"A1","b":"A2"}`))
	srv := ServerState{ID: "srv-n", Version: 2, Data: json.RawMessage(`{"a":"A1","b":"0"}`), Paths: []string{"/a"}, Base: json.RawMessage(`{"a":"0","b":"0"}`)}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "a", srv); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.Conflict == nil || len(e.Conflict.Paths) != 1 || e.Server.Version != 3 || string(e.Conflict.Paths[0].Server) != `"A1"` {
		t.Fatalf("conflict: %+v (server %+v)", e.Conflict, e.Server)
	}
}

// TestMergedAnswerBeforeAWholeUpdateKeepsItsBase: a merging server's
// answer brings another device's field while an update of the whole data
// waits behind: that update was made without it, so the entity's version
// stays (the answer is kept beside), and the update goes on the version
// it was made on instead of overwriting the field.
func TestMergedAnswerBeforeAWholeUpdateKeepsItsBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"a":1}`, `{"b":2}`)
	first, _ := s.Claim(ctx, "acct", "w", time.Minute)
	many := map[string]int{}
	for i := range fieldmerge.MaxPaths + 1 {
		many[fmt.Sprintf("f%d", i)] = i
	}
	patch, _ := json.Marshal(many)
	if r := mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: patch}); r.Operation.Paths != nil {
		t.Fatalf("1,001 top-level fields: %d paths, want the whole data", len(r.Operation.Paths))
	}
	if _, err := s.Complete(ctx, first.ID, "w", Completion{ServerID: "srv-n", ServerVersion: 3, Data: json.RawMessage(`{"a":2,"b":2}`)}); err != nil {
		t.Fatal(err)
	}
	e, _ := entity(t, s, "n")
	if e.ServerVersion != 1 || e.Server == nil || e.Server.Version != 3 {
		t.Fatalf("after the merged answer: version %d, server %+v", e.ServerVersion, e.Server)
	}
}

// TestRenewedUpdateNamesWhatItCarries: an edit that resolves a conflict
// sends the refused update again with the current data: it names the
// edit's fields too, a field it named under one now a scalar as that
// scalar, and carries the updates queued between.
func TestRenewedUpdateNamesWhatItCarries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := fieldsSetup(t, `{"o":{"x":"0"},"t":"0"}`, `{"o":{"x":"B1"}}`)
	op, _ := s.Claim(ctx, "acct", "w", time.Minute)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"t":"B2"}`)})
	srv := ServerState{ID: "srv-n", Version: 2, Data: json.RawMessage(`{"o":{"x":"A1"},"t":"0"}`), Paths: []string{"/o/x"}, Base: json.RawMessage(`{"o":{"x":"0"},"t":"0"}`)}
	if err := s.Conflict(ctx, op.ID, "w", CodeVersionConflict, "x", srv); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "n", Data: json.RawMessage(`{"o":"S"}`)})
	head, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || head.ID != op.ID || !slices.Equal(head.Paths, []string{"/o", "/t"}) || string(head.Payload) != `{"o":"S","t":"B2"}` {
		t.Fatalf("the renewed head: %+v (payload %s) %v", head, head.Payload, err)
	}
}
