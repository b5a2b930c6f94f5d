package queue

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

// The seeds run in every `go test`; a longer run is
// `go test -run '^$' -fuzz FuzzMergePatch -fuzztime 10m ./queue`.

// mergePatch on any object target and patch the store accepts gives an
// object that holds every non-null scalar of the patch, none of its
// nulls, and is unchanged by applying the patch again (RFC 7396 patches
// are idempotent); its output is canonical.
func FuzzMergePatch(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"a":1}`, `{"a":null}`},
		{`{"a":{"b":1,"c":[1,2]}}`, `{"a":{"b":null,"d":{"e":null}}}`},
		{`{"a":"x"}`, `{"a":{"b":{"c":1}}}`},
		{`{}`, `{"n":1.50,"s":"\u00e9<>&","z":-0}`},
		{`{"a":[{"b":1}]}`, `{"a":[{"b":null}]}`},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		if !accepted(target) || !accepted(patch) {
			return
		}
		target, _ = canonicalJSON(target)
		patch, _ = canonicalJSON(patch)
		got, err := mergePatch(target, patch)
		if err != nil {
			t.Fatalf("mergePatch(%s, %s): %v", target, patch, err)
		}
		if !isObject(got) {
			t.Fatalf("mergePatch(%s, %s) = %s: not an object", target, patch, got)
		}
		again, err := mergePatch(got, patch)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("patch applied twice: %s then %s (%v)", got, again, err)
		}
		if c, _ := canonicalJSON(got); !bytes.Equal(c, got) {
			t.Fatalf("output %s is not canonical (%s)", got, c)
		}
		var p, r map[string]any
		decodeInto(t, patch, &p)
		decodeInto(t, got, &r)
		for k, v := range p {
			rv, ok := r[k]
			switch v.(type) {
			case nil:
				if ok {
					t.Fatalf("%q is null in the patch but %v in %s", k, rv, got)
				}
			case map[string]any:
			default:
				if !reflect.DeepEqual(rv, v) {
					t.Fatalf("%q is %v in the patch but %v in %s", k, v, rv, got)
				}
			}
		}
	})
}

// canonicalJSON of any value the store accepts is a fixed point and holds
// the same value.
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{`{"b":1,"a":[true,null,"x"]}`, `{"n":1e400,"m":-0.0}`, `{"s":"\u2028<\u00e9>"}`, `{"a":{"b":{"c":{}}}}`, `{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !accepted(data) {
			return
		}
		c, err := canonicalJSON(data)
		if err != nil {
			t.Fatalf("canonicalJSON(%q): %v", data, err)
		}
		if c2, err := canonicalJSON(c); err != nil || !bytes.Equal(c, c2) {
			t.Fatalf("not a fixed point: %s then %s (%v)", c, c2, err)
		}
		var a, b any
		decodeInto(t, data, &a)
		decodeInto(t, c, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("canonicalJSON changed the value: %q -> %s", data, c)
		}
	})
}

// After jsonstrict.Check, checkedObject tells objects as isObject does.
func FuzzCheckedObject(f *testing.F) {
	for _, seed := range []string{`{}`, " \n\t{\"a\":1} ", `[{}]`, `"{"`, `null`, `1`, ` `, `{"a":1}{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if jsonstrict.Check(data, MaxDataDepth) != nil {
			return
		}
		if checkedObject(data) != isObject(data) {
			t.Fatalf("checkedObject(%q) = %v, isObject %v", data, checkedObject(data), isObject(data))
		}
	})
}

// isObject reports whether data is one JSON object and nothing else, by
// decoding it (the oracle of checkedObject).
func isObject(data []byte) bool {
	d := json.NewDecoder(bytes.NewReader(data))
	var m map[string]json.RawMessage
	if err := d.Decode(&m); err != nil || m == nil {
		return false
	}
	_, err := d.Token()
	return err != nil // io.EOF: nothing after the object
}

// accepted: data is what a write may carry (one strict JSON object).
func accepted(data []byte) bool {
	return jsonstrict.Check(data, MaxDataDepth) == nil && isObject(data)
}

func decodeInto(t *testing.T, data []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}
