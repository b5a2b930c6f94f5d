package queue

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

// Entity data that readers could read differently, and ids that cannot
// be addressed, are refused with ErrInvalidWrite, nothing written. A JSON
// refusal also wraps the *jsonstrict.Error that says why.
func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	ctx := context.Background()
	mustApply(t, s, Write{Op: OpCreate, EntityID: "e", Data: json.RawMessage(`{"a":1}`)})
	deep := strings.Repeat(`{"a":`, 9990) + "1" + strings.Repeat("}", 9990)
	for _, tc := range []struct {
		name string
		w    Write
		kind jsonstrict.Kind // 0: not a JSON refusal
	}{
		{"invalid UTF-8", Write{Op: OpCreate, Data: json.RawMessage("{\"\xff\":1,\"\xfe\":2}")}, jsonstrict.InvalidUTF8},
		{"lone surrogate", Write{Op: OpCreate, Data: json.RawMessage(`{"n":"\ud800"}`)}, jsonstrict.LoneSurrogate},
		{"duplicate name", Write{Op: OpCreate, Data: json.RawMessage(`{"id":"a","id":"b"}`)}, jsonstrict.DuplicateName},
		{"duplicate escaped name", Write{Op: OpCreate, Data: json.RawMessage(`{"a":1,"\u0061":2}`)}, jsonstrict.DuplicateName},
		{"too deep", Write{Op: OpCreate, Data: json.RawMessage(deep)}, jsonstrict.TooDeep},
		{"too deep patch", Write{Op: OpUpdate, EntityID: "e", Data: json.RawMessage(deep)}, jsonstrict.TooDeep},
		{"invalid UTF-8 patch", Write{Op: OpUpdate, EntityID: "e", Data: json.RawMessage("{\"a\":\"\xff\"}")}, jsonstrict.InvalidUTF8},
		{"id .", Write{Op: OpCreate, EntityID: ".", Data: json.RawMessage(`{}`)}, 0},
		{"id ..", Write{Op: OpCreate, EntityID: "..", Data: json.RawMessage(`{}`)}, 0},
		{"update id ..", Write{Op: OpUpdate, EntityID: "..", Data: json.RawMessage(`{}`)}, 0},
		{"operation id .", Write{Op: OpCreate, OperationID: ".", Data: json.RawMessage(`{}`)}, 0},
	} {
		w := tc.w
		w.AccountID, w.EntityType = "acct", "note"
		if len(w.Data) > 0 && !strings.HasPrefix(tc.name, "too deep") {
			w.Data = append(json.RawMessage(nil), w.Data...)
		}
		_, err := s.Apply(ctx, w)
		if !errors.Is(err, ErrInvalidWrite) {
			t.Errorf("%s: %v, want ErrInvalidWrite", tc.name, err)
			continue
		}
		var je *jsonstrict.Error
		if got := errors.As(err, &je); got != (tc.kind != 0) || got && je.Kind != tc.kind {
			t.Errorf("%s: %v, want a jsonstrict refusal of kind %v", tc.name, err, tc.kind)
		}
	}
	st, _ := s.Stats()
	if n := st.Counts[StatePending]; n != 1 {
		t.Fatalf("%d operations pending, want only the first create", n)
	}
	e, err := s.GetEntity("acct", "note", "e")
	if err != nil || string(e.Data) != `{"a":1}` {
		t.Fatalf("entity after refused patches: %s %v", e.Data, err)
	}
}

// mergePatch does work in proportion to the size of its input, not to
// its depth squared: doubling the depth about doubles the bytes it
// allocates. (Counted, not timed; not parallel, so nothing else
// allocates meanwhile.)
func TestMergePatchIsLinear(t *testing.T) {
	nested := func(depth int) json.RawMessage {
		return json.RawMessage(strings.Repeat(`{"a":`, depth) + `{"b":null,"c":1}` + strings.Repeat("}", depth))
	}
	allocated := func(depth int) uint64 {
		target, patch := nested(depth), nested(depth)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 5 {
			if _, err := mergePatch(target, patch); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	a60, a120 := allocated(60), allocated(120)
	if ratio := float64(a120) / float64(a60); ratio > 2.8 {
		t.Fatalf("bytes allocated at depth 120 / depth 60 = %d / %d = %.2f: not linear", a120, a60, ratio)
	}
}
