package queue

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/clocktest"
	"pgregory.net/rapid"
)

// drawString draws the kinds of strings the rows hold: ids (UUIDs in
// their canonical form and not), hex fingerprints, anything else.
func drawString(t *rapid.T, label string) string {
	switch rapid.IntRange(0, 7).Draw(t, label+" kind") {
	case 0:
		return ""
	case 1: // canonical UUID
		return unpackUUID(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, label))
	case 2: // a UUID in capitals stays as it is
		u := []byte(unpackUUID(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, label)))
		for i, c := range u {
			if c >= 'a' && c <= 'f' {
				u[i] = c - 'a' + 'A'
			}
		}
		return string(u)
	case 3: // a SHA-256 fingerprint
		return rapid.StringMatching(`[0-9a-f]{64}`).Draw(t, label)
	case 4: // hex of odd length, or short
		return rapid.StringMatching(`[0-9a-f]{1,15}|[0-9a-f]{17}`).Draw(t, label)
	case 5: // almost a UUID
		return rapid.StringMatching(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-g]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).Draw(t, label)
	default:
		return rapid.String().Draw(t, label)
	}
}

func drawTime(t *rapid.T, label string) time.Time {
	switch rapid.IntRange(0, 5).Draw(t, label+" kind") {
	case 0:
		return time.Time{}
	case 1: // far from the others: the absolute form
		return time.Unix(rapid.Int64Range(-62135596800, 253402300799).Draw(t, label), rapid.Int64Range(0, 999999999).Draw(t, label+" ns"))
	case 2: // in another zone, with a monotonic reading
		return time.Now().In(time.FixedZone("x", 3600)).Add(time.Duration(rapid.Int64().Draw(t, label) % int64(24*time.Hour)))
	default: // near the clock's start, nanoseconds apart
		return clocktest.Start.Add(time.Duration(rapid.Int64Range(-1<<40, 1<<40).Draw(t, label)))
	}
}

// fillRandom sets every exported field of the struct v points to, by its
// type. A field of a type it does not know fails the test: teach the row
// codec (rowcodec.go) the new field, then this function its type.
// drawPaths draws a list of paths: nil, empty or a few.
func drawPaths(t *rapid.T, name string) []string {
	switch rapid.IntRange(0, 2).Draw(t, name+" kind") {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	return rapid.SliceOfN(rapid.StringMatching(`(/[a-z~0-1]{0,4}){1,3}`), 1, 4).Draw(t, name)
}

func fillRandom(t *rapid.T, v any, skip ...string) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if !f.IsExported() || contains(skip, f.Name) {
			continue
		}
		fv := rv.Field(i)
		switch fv.Interface().(type) {
		case State:
			fv.SetString(rapid.SampledFrom(append(stateTable, "", "some_new_state")).Draw(t, f.Name))
		case OpType:
			fv.SetString(rapid.SampledFrom(append(opTypeTable, "", "upsert")).Draw(t, f.Name))
		case SyncState:
			fv.SetString(rapid.SampledFrom(append(syncStateTable, "", "paused")).Draw(t, f.Name))
		case string:
			fv.SetString(drawString(t, f.Name))
		case time.Time:
			fv.Set(reflect.ValueOf(drawTime(t, f.Name)))
		case json.RawMessage:
			if b := rapid.SliceOf(rapid.Byte()).Draw(t, f.Name); len(b) > 0 {
				fv.SetBytes(b)
			}
		case bool:
			fv.SetBool(rapid.Bool().Draw(t, f.Name))
		case int, int64:
			fv.SetInt(rapid.Int64().Draw(t, f.Name))
		case uint64:
			fv.SetUint(rapid.Uint64().Draw(t, f.Name))
		case []string:
			if p := drawPaths(t, f.Name); p != nil {
				fv.Set(reflect.ValueOf(p))
			}
		case *ServerState:
			if rapid.Bool().Draw(t, f.Name) {
				srv := &ServerState{Version: rapid.Int64Range(1, 1<<62).Draw(t, f.Name+" version"), Deleted: rapid.Bool().Draw(t, f.Name+" deleted")}
				if b := rapid.SliceOf(rapid.Byte()).Draw(t, f.Name+" data"); len(b) > 0 {
					srv.Data = b
				}
				srv.ID = drawString(t, f.Name+" id")
				srv.Missing = drawString(t, f.Name+" missing")
				srv.Paths = drawPaths(t, f.Name+" paths")
				if b := rapid.SliceOf(rapid.Byte()).Draw(t, f.Name+" base"); len(b) > 0 {
					srv.Base = b
				}
				fv.Set(reflect.ValueOf(srv))
			}
		default:
			t.Fatalf("field %s of %T has type %s, which the row codec test does not know", f.Name, v, f.Type)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// normalize is what a row read back holds: times in UTC without a
// monotonic reading, empty bytes as nil.
func normalize(v any) {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		fv := rv.Field(i)
		switch x := fv.Interface().(type) {
		case time.Time:
			if x.IsZero() {
				fv.Set(reflect.ValueOf(time.Time{})) // the zero instant, in any zone
			} else {
				fv.Set(reflect.ValueOf(x.Round(0).UTC()))
			}
		case json.RawMessage:
			if len(x) == 0 {
				fv.SetBytes(nil)
			}
		}
	}
}

// Every field of Operation and Entity survives the binary row, and so
// would a field added later or the test fails (fillRandom).
func TestRowCodecRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var op Operation
		fillRandom(t, &op, "Blocked", "BlockedBy") // computed when read, not stored
		inEntity := rapid.Bool().Draw(t, "inEntity")
		got, gotInEntity, err := decodeOp(op.Seq, encodeOp(&op, inEntity))
		if err != nil {
			t.Fatal(err)
		}
		if inEntity {
			op.Payload = nil // left out: the entity row holds it
		}
		normalize(&op)
		if gotInEntity != inEntity || !reflect.DeepEqual(*got, op) {
			t.Fatalf("operation round trip:\n got %+v (in entity %v)\nwant %+v (in entity %v)", *got, gotInEntity, op, inEntity)
		}

		var e Entity
		fillRandom(t, &e, "AccountID", "Type", "ID", "Blocked", "BlockedBy", "Conflict")
		e.AccountID = rapid.StringMatching(`[a-z0-9.@-]{1,20}`).Draw(t, "account")
		e.Type = rapid.StringMatching(`[a-z]{1,10}`).Draw(t, "type")
		e.ID = rapid.StringMatching(`[!-~]{1,40}`).Draw(t, "id")
		refs := rapid.SliceOf(rapid.Uint64()).Draw(t, "refs")
		k := entityKey(e.AccountID, e.Type, e.ID)
		for _, alias := range []bool{false, true} {
			gotE, gotRefs, err := decodeEntityRow(k, encodeEntity(&e, refs), alias)
			if err != nil {
				t.Fatal(err)
			}
			want := e
			normalize(&want)
			if len(refs) == 0 {
				refs = nil
			}
			if !reflect.DeepEqual(*gotE, want) || !reflect.DeepEqual(gotRefs, refs) {
				t.Fatalf("entity round trip:\n got %+v %v\nwant %+v %v", *gotE, gotRefs, want, refs)
			}
		}

		// The partition's list (schema 6): any ascending list survives
		// the row, and replacing it (withUnfinished) changes nothing
		// else.
		list := drawSeqs(t, "unfinished")
		row := encodeEntityRow(&e, refs, list)
		_, _, gotList, tail, err := entityRowParts(row)
		if err != nil || !reflect.DeepEqual(gotList, list) {
			t.Fatalf("unfinished list %v read back as %v (%v)", list, gotList, err)
		}
		other := drawSeqs(t, "other")
		edited := withUnfinished(row, tail, other)
		if !bytes.Equal(edited, encodeEntityRow(&e, refs, other)) {
			t.Fatalf("list %v replaced by %v: %x, want %x", list, other, edited, encodeEntityRow(&e, refs, other))
		}
		gotE, gotRefs, err := decodeEntityRow(k, edited, false)
		want := e
		normalize(&want)
		if err != nil || !reflect.DeepEqual(*gotE, want) || !reflect.DeepEqual(gotRefs, refs) {
			t.Fatalf("entity after its list changed:\n got %+v %v %v\nwant %+v %v", gotE, gotRefs, err, want, refs)
		}
	})
}

// drawSeqs draws an ascending list of seqs, nil for none.
func drawSeqs(t *rapid.T, label string) []uint64 {
	var list []uint64
	prev := uint64(0)
	for _, d := range rapid.SliceOfN(rapid.Uint64Range(1, 1<<40), 0, 20).Draw(t, label) {
		prev += d
		list = append(list, prev)
	}
	return list
}

// A small create's rows, as the queue writes them, against the JSON rows
// of schema 2.
func TestRowSizes(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	r := mustApply(t, s, Write{
		Op: OpCreate, EntityID: "3f0c1f8e-8a4b-4c7e-9d2a-6b1e5c0f7a93", OperationID: "9b2d4e6f-1a3c-4e5f-8a7b-0c1d2e3f4a5b",
		RequestFingerprint: "d5e93a650d82156976c7b5d50653d5a2afbbfec5a2a4d99c0860ccd3a9877d4f",
		Data:               json.RawMessage(`{"title":"buy milk and bread","done":false,"tags":["home","errands"]}`),
	})
	jsOp, _ := marshal(&r.Operation)
	jsEntity, _ := marshal(&r.Entity)
	binOp := encodeOp(&r.Operation, true)
	binEntity := encodeEntity(&r.Entity, []uint64{r.Operation.Seq})
	t.Logf("operation row %d bytes (JSON: %d), entity row %d bytes (JSON: %d)", len(binOp), len(jsOp), len(binEntity), len(jsEntity))
	if len(binOp) > len(jsOp)/3 || len(binEntity) > len(jsEntity)/2 {
		t.Errorf("rows of %d and %d bytes: want under a third and a half of JSON's", len(binOp), len(binEntity))
	}
}

// FuzzDecodeRow: no input makes the row decoders panic, and a row they
// accept reads back the same once written again.
func FuzzDecodeRow(f *testing.F) {
	op := Operation{ID: "9b2d4e6f-1a3c-4e5f-8a7b-0c1d2e3f4a5b", AccountID: "acct", Type: OpUpdate, EntityType: "note", EntityID: "e1", PayloadVersion: 3,
		Payload: json.RawMessage(`{"a":1}`), PayloadFingerprint: "d5e93a650d82156976c7b5d50653d5a2afbbfec5a2a4d99c0860ccd3a9877d4f",
		State: StateRetryWaiting, AttemptCount: 2, CreatedAt: clocktest.Start, NextAttemptAt: clocktest.Start.Add(time.Minute),
		LastErrorCode: "network", MaybeApplied: true}
	f.Add(encodeOp(&op, false))
	f.Add(encodeOp(&op, true))
	e := Entity{AccountID: "acct", Type: "note", ID: "e1", Data: json.RawMessage(`{"a":1}`), SyncState: SyncFailed, Version: 3,
		CreatedAt: clocktest.Start, UpdatedAt: clocktest.Start.Add(time.Hour), LastOperationID: op.ID, SyncError: "x"}
	f.Add(encodeEntity(&e, []uint64{1, 2}))
	f.Add(encodeEntityRow(&e, []uint64{1, 2}, []uint64{3, 7, 9}))
	f.Add([]byte(`{"id":"x","seq":1}`))
	f.Add([]byte{rowV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	k := entityKey("acct", "note", "e1")
	f.Fuzz(func(t *testing.T, v []byte) {
		if op, inEntity, err := decodeOp(7, v); err == nil && len(v) > 0 && v[0] == rowV1 {
			again, inEntity2, err := decodeOp(7, encodeOp(op, inEntity))
			if err != nil || inEntity2 != inEntity || !reflect.DeepEqual(again, op) {
				t.Fatalf("operation %+v read back as %+v (%v)", op, again, err)
			}
		}
		e, refs, err := decodeEntityRow(k, v, false)
		if err == nil && len(v) > 0 && v[0] == rowV1 {
			again, refs2, err := decodeEntityRow(k, encodeEntity(e, refs), false)
			if err != nil || !reflect.DeepEqual(again, e) || !reflect.DeepEqual(refs2, refs) {
				t.Fatalf("entity %+v read back as %+v (%v)", e, again, err)
			}
		}
		// Read in place (alias), the row says the same.
		if ea, refsA, errA := decodeEntityRow(k, v, true); (err == nil) != (errA == nil) || err == nil && (!reflect.DeepEqual(ea, e) || !reflect.DeepEqual(refsA, refs)) {
			t.Fatalf("aliased read %+v %v %v; copying read %+v %v %v", ea, refsA, errA, e, refs, err)
		}
		// The write path's quick read agrees with the full one.
		if len(v) > 0 && v[0] == rowV1 {
			data, refs3, err3 := entityDataRefs(v)
			if (err == nil) != (err3 == nil) || err == nil && (string(data) != string(e.Data) || !reflect.DeepEqual(refs3, refs)) {
				t.Fatalf("entityDataRefs: %q %v %v; decodeEntityRow: %+v %v %v", data, refs3, err3, e, refs, err)
			}
		}
	})
}

// Every field of Event survives its row (its seq is its key), and an
// event stored as JSON by an older syncd is still read. The row is a
// fraction of the JSON.
func TestEventCodecRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var e Event
		fillRandom(t, &e)
		seq := e.Seq
		got, err := decodeEvent(seq, encodeEvent(&e))
		if err != nil {
			t.Fatal(err)
		}
		normalize(&e)
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("event round trip:\n got %+v\nwant %+v", got, e)
		}
		old, err := json.Marshal(e)
		if err != nil {
			return // data that is no JSON: no older syncd wrote it
		}
		if got, err := decodeEvent(seq, old); err != nil || got.Type != e.Type || got.EntityID != e.EntityID || got.Seq != seq {
			t.Fatalf("an event in JSON: %+v %v", got, err)
		}
	})
	e := Event{Seq: 12, Time: time.Date(2026, 12, 4, 21, 0, 0, 123456789, time.UTC), Type: EventOperationState,
		AccountID: "alice@example.com", EntityType: "note", EntityID: "01939b8e-6c1a-7000-8000-00000000abcd",
		OperationID: "01939b8e-6c1a-7000-8000-00000000abce", State: StatePending}
	row, js := encodeEvent(&e), must(json.Marshal(e))
	if len(row)*3 > len(js) {
		t.Errorf("an operation.state event: %d bytes as a row, %d as JSON: want a third at most", len(row), len(js))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
