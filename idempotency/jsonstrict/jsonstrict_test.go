package jsonstrict

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		in   string
		kind Kind // 0: valid
	}{
		{`{}`, 0},
		{` {"a":1,"b":[true,false,null],"c":{"a":"x"}} `, 0},
		{`"\ud83d\ude00"`, 0},
		{`"😀 é"`, 0},
		{`-0.5e+10`, 0},
		{`{"a":1,"\u0062":2}`, 0},
		{deep(DefaultMaxDepth), 0},

		{``, Syntax},
		{`  `, Syntax},
		{`{} {}`, Syntax},
		{`{"a":1,}`, Syntax},
		{`[1,]`, Syntax},
		{`01`, Syntax},
		{`1.`, Syntax},
		{`1e`, Syntax},
		{`tru`, Syntax},
		{`"a` + "\n" + `"`, Syntax},
		{`"\x"`, Syntax},
		{`"\u12G4"`, Syntax},
		{`{"a" 1}`, Syntax},
		{"\xff", Syntax},

		{"\"\xff\"", InvalidUTF8},
		{"{\"\xff\":1,\"\xfe\":2}", InvalidUTF8},
		{"\"\xed\xa0\x80\"", InvalidUTF8}, // an encoded surrogate
		{`"\ud800"`, LoneSurrogate},
		{`"\udfff"`, LoneSurrogate},
		{`"\ud800\u0041"`, LoneSurrogate},
		{`"\ude00\ud83d"`, LoneSurrogate},
		{`{"n":"\ud800x"}`, LoneSurrogate},

		{`{"id":"a","id":"b"}`, DuplicateName},
		{`{"a":1,"\u0061":2}`, DuplicateName},
		{`{"x":{"a":1,"b":2,"a":3}}`, DuplicateName},
		{`{"a":{"a":1},"b":{"a":1}}`, 0},

		{deep(DefaultMaxDepth + 1), TooDeep},
		{strings.Repeat(`{"a":`, DefaultMaxDepth+1) + "1" + strings.Repeat("}", DefaultMaxDepth+1), TooDeep},
	}
	for _, tt := range tests {
		err := Check([]byte(tt.in), 0)
		var je *Error
		switch {
		case tt.kind == 0 && err != nil:
			t.Errorf("Check(%q) = %v, want nil", tt.in, err)
		case tt.kind != 0 && !errors.As(err, &je):
			t.Errorf("Check(%q) = %v, want a %v *Error", tt.in, err, tt.kind)
		case tt.kind != 0 && je.Kind != tt.kind:
			t.Errorf("Check(%q) = %v (%v), want %v", tt.in, err, je.Kind, tt.kind)
		}
	}
}

func TestCheckManyNames(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":1`)
	}
	ok := b.String() + "}"
	if err := Check([]byte(ok), 0); err != nil {
		t.Fatalf("100 distinct names: %v", err)
	}
	dup := b.String() + `,"kxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx":2}` // k + 37 x: a name already seen
	var je *Error
	if err := Check([]byte(dup), 0); !errors.As(err, &je) || je.Kind != DuplicateName {
		t.Fatalf("a duplicate past the list size: %v", err)
	}
}

func TestCheckDepthArgument(t *testing.T) {
	t.Parallel()
	if err := Check([]byte(`[[1]]`), 2); err != nil {
		t.Fatalf("depth 2 at limit 2: %v", err)
	}
	if err := Check([]byte(`[[[1]]]`), 2); err == nil {
		t.Fatal("depth 3 at limit 2 was accepted")
	}
}

// FuzzCheck: whatever encoding/json calls valid, Check refuses only for
// the reasons it exists (never as a syntax error), and whatever Check
// accepts, encoding/json decodes.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2,{"b":null}]}`, `"\ud83d\ude00"`, `"\ud800"`, `{"a":1,"a":2}`, "\"\xff\"", `-1.5e3`, `[[[[]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Check(data, 0)
		valid := json.Valid(data)
		var je *Error
		if err != nil && !errors.As(err, &je) {
			t.Fatalf("error %v is not an *Error", err)
		}
		switch {
		case err == nil && !valid:
			t.Fatalf("Check accepted %q, which encoding/json refuses", data)
		case err != nil && je.Kind == Syntax && valid:
			t.Fatalf("Check calls %q a syntax error (%v), which encoding/json accepts", data, err)
		case err != nil && je.Kind == InvalidUTF8 && utf8.Valid(data):
			t.Fatalf("Check calls %q invalid UTF-8", data)
		}
		if je != nil && (je.Offset < 0 || je.Offset > len(data)) {
			t.Fatalf("offset %d outside the input of %d bytes", je.Offset, len(data))
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	data := []byte(`{"title":"Buy milk","done":false,"tags":["home","shop"],"due":"2026-12-03T10:00:00Z","notes":"two litres \u00e9","n":12.5}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := Check(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}
