package queue

import (
	"bytes"
	"testing"

	"github.com/syncd/syncd/idempotency/jsonstrict"
)

var canonSeeds = []string{
	`{}`, `[]`, `{"a":1}`, ` { "b" : 2 , "a" : [ 1 , 2 , { } ] } `,
	`{"title":"a pulled record","body":"xx","done":false,"n":12}`,
	`{"z":{"y":1,"x":{"w":null,"v":true}},"a":[{"d":1,"c":2}],"m":-0.5e+10}`,
	`{"s":"tab\there \"q\" back\\slash\nnew\rline","é":"ünïcödé 日本","a":"\u00e9"}`,
	`{"a":"\/","b":"\b\f","c":"\u2028","d":"` + "\u2028" + `"}`,
	`{"<":"&>","a":"<b>"}`, `{"aa":1,"a":2,"a\u0000":3}`, `{"b":1,"a\"":2}`,
	`{"n":1E400,"m":123456789012345678901234567890,"k":0.0000001}`,
	`{"":1," ":2}`, `{"a":1}  `, `{"a":1} x`, `{"a":1,"a":2}`, `{"a":tru}`, `{"a":"x` + "\xff" + `"}`,
	`{"deep":[[[[[[{"b":[],"a":{}}]]]]]]}`,
}

// canonAgrees checks canonicalPulled against canonicalJSON on data that
// jsonstrict.Check passes (the only data the pull gives it).
func canonAgrees(t *testing.T, data []byte) {
	t.Helper()
	if jsonstrict.Check(data, MaxDataDepth) != nil {
		return
	}
	want, wantErr := canonicalJSON(data)
	got, err := canonicalPulled(data)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("canonicalPulled(%q) = %q, %v; canonicalJSON: %q, %v", data, got, err, want, wantErr)
	}
}

func TestCanonicalPulledIsCanonicalJSON(t *testing.T) {
	for _, s := range canonSeeds {
		canonAgrees(t, []byte(s))
	}
}

// TestCanonicalPulledTakesCommonData: ordinary records do not fall back
// to the decode and encode (which would still be right, only slow).
func TestCanonicalPulledTakesCommonData(t *testing.T) {
	for _, s := range []string{
		`{"title":"a pulled record","body":"xx","done":false,"n":12}`,
		`{"b":{"d":[1,2,{"f":"line\nnext \"quoted\""}],"c":null},"a":"ünïcödé"}`,
	} {
		c := canonWriter{in: []byte(s)}
		if !c.value(0) {
			t.Errorf("%s: not taken on", s)
		}
	}
}

func FuzzCanonicalPulled(f *testing.F) {
	for _, s := range canonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		canonAgrees(t, data)
	})
}
