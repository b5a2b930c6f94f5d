package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

// Consecutive events survive a group row whatever fields they share with
// the event before them (each field is drawn anew or taken from it), and
// so does any tail of them (the sweep keeps a group's tail as a row).
func TestEventGroupRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, maxEventGroup).Draw(t, "n")
		first := rapid.Uint64Range(1, 1<<40).Draw(t, "first")
		evs := make([]Event, n)
		for i := range evs {
			fillRandom(t, &evs[i])
			if i > 0 {
				// Take some fields from the event before.
				prev, cur := reflect.ValueOf(&evs[i-1]).Elem(), reflect.ValueOf(&evs[i]).Elem()
				for f := range cur.NumField() {
					if rapid.Bool().Draw(t, fmt.Sprintf("same %d.%d", i, f)) {
						cur.Field(f).Set(prev.Field(f))
					}
				}
			}
			evs[i].Seq = first + uint64(i)
			normalize(&evs[i])
		}
		cut := rapid.IntRange(0, n-1).Draw(t, "cut")
		tail := evs[cut:]
		row := encodeEventRow(tail)
		var got []Event
		if err := decodeEvents(tail[0].Seq, row, func(e Event) error { got = append(got, e); return nil }); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tail) {
			t.Fatalf("events round trip:\n got %+v\nwant %+v", got, tail)
		}
		if last, err := lastEventSeq(tail[0].Seq, row); err != nil || last != evs[n-1].Seq {
			t.Fatalf("last seq of the row %d, %v; want %d", last, err, evs[n-1].Seq)
		}
	})
}

// A group's shared fields are left out: a create's two events take 0.6
// of the bytes of two rows, and a malformed group is an error, never a
// panic or a wrong event.
func TestEventGroupForm(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 9, 0, 0, 123456789, time.UTC)
	changed := Event{Seq: 7, Time: now, Type: EventEntityChanged, AccountID: "alice", EntityType: "note",
		EntityID: "01939b8e-6c1a-7000-8000-00000000abcd", OperationID: "import-123456", SyncState: SyncPending}
	state := changed
	state.Seq, state.Type, state.SyncState, state.State, state.App = 8, EventOperationState, "", StatePending, "importer"
	group := encodeEventRow([]Event{changed, state})
	// With their keys (8 bytes each): one row against two.
	one, two := 8+len(group), 16+len(encodeEvent(&changed))+len(encodeEvent(&state))
	if one*100 > two*65 {
		t.Errorf("a create's events: %d bytes as a group, %d as two rows: want at most 0.65 of it", one, two)
	}
	for i := 1; i < len(group); i++ {
		err := decodeEvents(7, group[:i], func(Event) error { return nil })
		if _, lerr := lastEventSeq(7, group[:i]); err == nil && lerr == nil {
			// A cut at a member's end is a shorter group, read as one.
			var got []Event
			decodeEvents(7, group[:i], func(e Event) error { got = append(got, e); return nil })
			if len(got) != 1 || got[0].Seq != 7 {
				t.Fatalf("group cut at %d read as %+v", i, got)
			}
		}
	}
	if err := decodeEvents(7, []byte{rowGroup, 1, 2, rowV1, 0}, func(Event) error { return nil }); err == nil {
		t.Fatal("a first member that takes fields from none was read")
	}
}

// Events(since, limit) returns exactly the events after since, whichever
// row holds them: single writes (a group each), batches (groups of up to
// maxEventGroup across writes) and what a sweep cut inside a group left.
func TestEventsAcrossGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var emitted []Event
	s, _ := setup(t, Config{NoSync: true, EventHistory: 1 << 20, OnCommit: func(ev []Event) { emitted = append(emitted, ev...) }})
	n := 0
	next := func(op OpType, id string) Write {
		n++
		w := Write{Op: op, AccountID: "acct", EntityType: "note", EntityID: id}
		if op != OpDelete {
			w.Data = json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))
		}
		return w
	}
	for i := range 5 {
		mustApply(t, s, next(OpCreate, fmt.Sprintf("single%d", i)))
	}
	for _, size := range []int{1, 7, 40} {
		ws := make([]Write, size)
		for i := range ws {
			ws[i] = next(OpCreate, fmt.Sprintf("batch%d-%d", size, i))
		}
		if _, err := s.ApplyBatch(ctx, ws, false); err != nil {
			t.Fatal(err)
		}
	}
	mustApply(t, s, next(OpUpdate, "single1"))
	mustApply(t, s, next(OpDelete, "single2"))

	check := func(from int) {
		t.Helper()
		want := emitted[from:]
		for i := range want {
			want[i].Time = want[i].Time.Round(0).UTC()
		}
		for since := uint64(0); since <= want[len(want)-1].Seq+1; since++ {
			for _, limit := range []int{0, 1, 3, 50} {
				got, oldest, err := s.Events(since, limit)
				if err != nil {
					t.Fatal(err)
				}
				var exp []Event
				for _, e := range want {
					if e.Seq > since && (limit == 0 || len(exp) < limit) {
						exp = append(exp, e)
					}
				}
				if oldest != want[0].Seq || len(got) != len(exp) || len(exp) > 0 && !reflect.DeepEqual(got, exp) {
					t.Fatalf("Events(%d, %d): oldest %d, %d events %+v; want oldest %d, %+v", since, limit, oldest, len(got), got, want[0].Seq, exp)
				}
			}
		}
	}
	check(0)
	var rows int
	s.db.View(func(tx *bolt.Tx) error { rows = tx.Bucket(bucketEvents).Stats().KeyN; return nil })
	if rows*2 > len(emitted) {
		t.Fatalf("%d events in %d rows: the events of a write share one", len(emitted), rows)
	}

	// The sweep keeps the history exactly, cutting a group.
	for _, history := range []int{len(emitted) - 3, 17, 1} {
		s.cfg.EventHistory = history
		if _, _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		check(len(emitted) - history)
	}
}

// FuzzDecodeEvents: no row makes the change log's reader panic, and the
// events of a row it accepts read back the same once written again
// (the sweep writes a cut group's tail that way).
func FuzzDecodeEvents(f *testing.F) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 1, time.UTC)
	a := Event{Seq: 3, Time: now, Type: EventEntityChanged, AccountID: "alice", EntityType: "note", EntityID: "e1", OperationID: "op-1", SyncState: SyncPending}
	b := a
	b.Seq, b.Type, b.SyncState, b.State, b.App = 4, EventOperationState, "", StatePending, "app"
	f.Add(encodeEvent(&a))
	f.Add(encodeEventRow([]Event{a, b}))
	f.Add([]byte(`{"type":"entity.changed"}`))
	f.Add([]byte{rowGroup}) // an empty group
	f.Fuzz(func(t *testing.T, row []byte) {
		var evs []Event
		if err := decodeEvents(3, row, func(e Event) error { evs = append(evs, e); return nil }); err != nil {
			return
		}
		if len(row) > 0 && row[0] == '{' {
			return // JSON from an older syncd (its seq its own): never written again as it was
		}
		last, err := lastEventSeq(3, row)
		if err != nil || len(evs) == 0 || last != evs[len(evs)-1].Seq {
			t.Fatalf("%d events read, last seq %d (%v)", len(evs), last, err)
		}
		var again []Event
		if err := decodeEvents(3, encodeEventRow(evs), func(e Event) error { again = append(again, e); return nil }); err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("events %+v written again read back as %+v (%v)", evs, again, err)
		}
	})
}
