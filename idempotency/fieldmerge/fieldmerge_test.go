package fieldmerge_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// badObjects are inputs that are not one JSON object.
var badObjects = []string{``, ` `, `null`, `[]`, `"x"`, `1`, `{`, `{"a":}`, `{} {}`, `{} 1`, `{}}`, `{"a":1}]`}

func TestPatchPaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		patch string
		want  []string
	}{
		{"empty patch", `{}`, nil},
		{"one member", `{"title":"x"}`, []string{"/title"}},
		{"nested objects recurse", `{"title":"t","address":{"city":"Lyon","geo":{"lat":1}}}`,
			[]string{"/address/city", "/address/geo/lat", "/title"}},
		{"null removes", `{"note":null,"address":{"zip":null}}`, []string{"/address/zip", "/note"}},
		{"arrays are leaves", `{"tags":["a","b"],"items":[{"x":1}],"none":[]}`, []string{"/items", "/none", "/tags"}},
		{"empty object is a leaf", `{"a":{},"b":{"c":{}}}`, []string{"/a", "/b/c"}},
		{"scalars of every kind", `{"s":"","n":1.0,"t":true,"f":false}`, []string{"/f", "/n", "/s", "/t"}},
		{"'/' and '~' escaped", `{"a/b":1,"c~d":{"e/f~":2},"~1":3}`, []string{"/a~1b", "/c~0d/e~1f~0", "/~01"}},
		{"empty member name", `{"":1,"a":{"":2}}`, []string{"/", "/a/"}},
		{"space around", " \n{\"a\":1}\t ", []string{"/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := fieldmerge.PatchPaths(json.RawMessage(tt.patch))
			if err != nil {
				t.Fatalf("PatchPaths(%s): %v", tt.patch, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("PatchPaths(%s) = %q, want %q", tt.patch, got, tt.want)
			}
			// A create sets the same paths as the patch that adds them all.
			leaves, err := fieldmerge.LeafPaths(json.RawMessage(tt.patch))
			if err != nil || !slices.Equal(leaves, tt.want) {
				t.Errorf("LeafPaths(%s) = %q, %v; want %q", tt.patch, leaves, err, tt.want)
			}
		})
	}
	for _, bad := range badObjects {
		if got, err := fieldmerge.PatchPaths(json.RawMessage(bad)); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("PatchPaths(%q) = %q, %v; want ErrInvalid", bad, got, err)
		}
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want []string
	}{
		{"equal", `{"a":1,"b":{"c":"x"}}`, `{"b":{"c":"x"},"a":1}`, nil},
		{"both empty", `{}`, `{}`, nil},
		{"a scalar changed", `{"a":1,"b":2}`, `{"a":1,"b":3}`, []string{"/b"}},
		{"nested: only the changed leaf", `{"address":{"city":"Paris","zip":"1"}}`, `{"address":{"city":"Lyon","zip":"1"}}`,
			[]string{"/address/city"}},
		{"a member on one side only", `{"a":1,"gone":2}`, `{"a":1,"new":{"x":1}}`, []string{"/gone", "/new"}},
		{"object against scalar", `{"a":{"x":1}}`, `{"a":5}`, []string{"/a"}},
		{"empty object against object", `{"a":{}}`, `{"a":{"x":1}}`, []string{"/a"}},
		{"arrays are leaves", `{"tags":[1,2]}`, `{"tags":[1,3]}`, []string{"/tags"}},
		{"null is a value", `{"a":null}`, `{}`, []string{"/a"}},
		{"numbers as written", `{"n":1}`, `{"n":1.0}`, []string{"/n"}},
		{"escaped names", `{"a/b":{"c~":1}}`, `{"a/b":{"c~":2}}`, []string{"/a~1b/c~0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := fieldmerge.Diff(json.RawMessage(tt.a), json.RawMessage(tt.b))
			if err != nil {
				t.Fatalf("Diff: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Diff(%s, %s) = %q, want %q", tt.a, tt.b, got, tt.want)
			}
			back, err := fieldmerge.Diff(json.RawMessage(tt.b), json.RawMessage(tt.a))
			if err != nil || !slices.Equal(back, tt.want) {
				t.Errorf("Diff(%s, %s) = %q, %v; want the same paths both ways", tt.b, tt.a, back, err)
			}
		})
	}
	for _, bad := range badObjects {
		if _, err := fieldmerge.Diff(json.RawMessage(bad), json.RawMessage(`{}`)); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Diff(%q, {}): %v, want ErrInvalid", bad, err)
		}
		if _, err := fieldmerge.Diff(json.RawMessage(`{}`), json.RawMessage(bad)); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Diff({}, %q): %v, want ErrInvalid", bad, err)
		}
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	const data = `{"title":"a<b>&c","n":1.0,"none":null,"tags":["x"],"address":{"zip":"1","city":"Lyon"},"a/b":{"~":true},"~1":"tilde one","/":"slash","e":{}}`
	tests := []struct {
		path   string
		want   string
		wantOK bool
	}{
		{"/title", `"a<b>&c"`, true}, // not HTML-escaped
		{"/n", `1.0`, true},          // the number as written
		{"/none", `null`, true},      // a null is a value
		{"/tags", `["x"]`, true},
		{"/address", `{"city":"Lyon","zip":"1"}`, true}, // compact, members sorted
		{"/address/city", `"Lyon"`, true},
		{"/a~1b/~0", `true`, true},
		{"/~01", `"tilde one"`, true}, // "~1" unescaped first, then "~0"
		{"/~1", `"slash"`, true},
		{"/e", `{}`, true},
		{"/missing", "", false},
		{"/address/missing", "", false},
		{"/title/x", "", false}, // through a scalar
		{"/tags/0", "", false},  // an array is a leaf
		{"/e/x", "", false},
	}
	for _, tt := range tests {
		got, ok, err := fieldmerge.Get(json.RawMessage(data), tt.path)
		if err != nil || ok != tt.wantOK || string(got) != tt.want {
			t.Errorf("Get(%s) = %s, %v, %v; want %s, %v", tt.path, got, ok, err, tt.want, tt.wantOK)
		}
	}
	for _, bad := range []string{"", "title", "/a~2", "/a~"} {
		if _, _, err := fieldmerge.Get(json.RawMessage(data), bad); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Get(%q): %v, want ErrInvalid", bad, err)
		}
	}
	for _, bad := range badObjects {
		if _, _, err := fieldmerge.Get(json.RawMessage(bad), "/a"); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Get on %q: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		dst, src string
		paths    []string
		want     string
	}{
		{"set", `{"a":1,"b":2}`, `{"a":9,"b":8}`, []string{"/a"}, `{"a":9,"b":2}`},
		{"add", `{"a":1}`, `{"b":2}`, []string{"/b"}, `{"a":1,"b":2}`},
		{"remove where src has none", `{"a":1,"b":2}`, `{"a":1}`, []string{"/b"}, `{"a":1}`},
		{"remove a nested member keeps its object", `{"o":{"x":1}}`, `{}`, []string{"/o/x"}, `{"o":{}}`},
		{"nothing on either side", `{"a":1}`, `{}`, []string{"/b"}, `{"a":1}`},
		{"creates intermediate objects", `{}`, `{"a":{"b":{"c":1}}}`, []string{"/a/b/c"}, `{"a":{"b":{"c":1}}}`},
		{"keeps siblings on the way", `{"a":{"k":0}}`, `{"a":{"b":{"c":1}}}`, []string{"/a/b/c"}, `{"a":{"b":{"c":1},"k":0}}`},
		{"replaces a scalar with an object", `{"a":1}`, `{"a":{"x":2}}`, []string{"/a/x"}, `{"a":{"x":2}}`},
		{"replaces an object with a scalar", `{"a":{"x":1,"y":2}}`, `{"a":3}`, []string{"/a"}, `{"a":3}`},
		{"removing through a scalar is nothing", `{"a":1}`, `{}`, []string{"/a/x"}, `{"a":1}`},
		{"null is a value", `{"a":1}`, `{"a":null}`, []string{"/a"}, `{"a":null}`},
		{"arrays whole", `{"t":[1]}`, `{"t":[2,3]}`, []string{"/t"}, `{"t":[2,3]}`},
		{"escaped names", `{}`, `{"a/b":{"~":1}}`, []string{"/a~1b/~0"}, `{"a/b":{"~":1}}`},
		{"duplicate and unsorted paths", `{"a":1,"b":2}`, `{"a":3}`, []string{"/b", "/a", "/b"}, `{"a":3}`},
		{"no paths re-encodes only", `{ "b" : 1, "a" : "<" }`, `{}`, nil, `{"a":"<","b":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			paths := slices.Clone(tt.paths)
			got, err := fieldmerge.Apply(json.RawMessage(tt.dst), json.RawMessage(tt.src), paths)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Apply(%s, %s, %q) = %s, want %s", tt.dst, tt.src, tt.paths, got, tt.want)
			}
			if !slices.Equal(paths, tt.paths) {
				t.Errorf("Apply changed its paths argument: %q", paths)
			}
		})
	}
	for _, bad := range badObjects {
		if _, err := fieldmerge.Apply(json.RawMessage(bad), json.RawMessage(`{}`), nil); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Apply onto %q: %v, want ErrInvalid", bad, err)
		}
		if _, err := fieldmerge.Apply(json.RawMessage(`{}`), json.RawMessage(bad), nil); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("Apply from %q: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := fieldmerge.Apply(json.RawMessage(`{}`), json.RawMessage(`{}`), []string{"/a", "a"}); !errors.Is(err, fieldmerge.ErrInvalid) {
		t.Errorf("Apply with path \"a\": %v, want ErrInvalid", err)
	}
}

func TestOverlaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p, q string
		want bool
	}{
		{"/a", "/a", true},
		{"/address", "/address/city", true},
		{"/address/city", "/address", true},
		{"/a", "/a/b/c", true},
		{"/address/city", "/address/zip", false},
		{"/a", "/ab", false},
		{"/ab", "/a", false},
		{"/a", "/b", false},
		{"/a", "/a~1b", false}, // the member "a/b", not "b" in "a"
		{"/a~1b", "/a/b", false},
		{"/a~0", "/a~0/x", true},
		{"/", "/a", false}, // the member "" is not the whole document
		{"/", "//x", true},
	}
	for _, tt := range tests {
		if got := fieldmerge.Overlaps(tt.p, tt.q); got != tt.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestParsePaths(t *testing.T) {
	t.Parallel()
	many := func(n int) []string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = "/a"
		}
		return ps
	}
	long := func(n int) string { return "/" + strings.Repeat("x", n-1) }
	tests := []struct {
		name  string
		paths []string
		ok    bool
	}{
		{"none", nil, true},
		{"fields", []string{"/title", "/address/city", "/a~1b", "/c~0d", "/", "//"}, true},
		{"MaxPaths", many(fieldmerge.MaxPaths), true},
		{"more than MaxPaths", many(fieldmerge.MaxPaths + 1), false},
		{"MaxPathBytes", []string{long(fieldmerge.MaxPathBytes)}, true},
		{"longer than MaxPathBytes", []string{"/a", long(fieldmerge.MaxPathBytes + 1)}, false},
		{"no leading slash", []string{"title"}, false},
		{"empty: the whole document", []string{""}, false},
		{"~2", []string{"/a~2"}, false},
		{"~ at the end", []string{"/a~"}, false},
		{"~ alone in a later token", []string{"/a/~/b"}, false},
		{"one bad among good", []string{"/a", "/b", "c"}, false},
	}
	for _, tt := range tests {
		err := fieldmerge.ParsePaths(tt.paths)
		if tt.ok && err != nil {
			t.Errorf("%s: ParsePaths: %v", tt.name, err)
		}
		if !tt.ok && !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("%s: ParsePaths: %v, want ErrInvalid", tt.name, err)
		}
	}
}

func TestPointer(t *testing.T) {
	t.Parallel()
	if got := fieldmerge.Pointer("a/b", "c~d", ""); got != "/a~1b/c~0d/" {
		t.Errorf("Pointer = %q", got)
	}
	if got := fieldmerge.Quote([]string{"/a", `/"b"`}); got != `"/a", "/\"b\""` {
		t.Errorf("Quote = %s", got)
	}
}

func TestReplace(t *testing.T) {
	t.Parallel()
	r := fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 7, Since: 2, Paths: map[string]int64{"/a": 7}}
	got := fieldmerge.Replace(r, json.RawMessage(`{"b":2}`))
	if string(got.Data) != `{"b":2}` || got.Version != 8 || got.Since != 8 || got.Paths != nil {
		t.Fatalf("Replace = %+v, want data {\"b\":2}, version and since 8, no paths", got)
	}
	if r.Version != 7 || len(r.Paths) != 1 {
		t.Errorf("Replace changed its argument: %+v", r)
	}
}

func TestChangedSince(t *testing.T) {
	t.Parallel()
	r := fieldmerge.Record{
		Data:    json.RawMessage(`{"title":"t","address":{"city":"c","zip":"z"},"e":{}}`),
		Version: 6, Since: 3,
		Paths: map[string]int64{"/title": 4, "/address/city": 6, "/gone": 5},
	}
	tests := []struct {
		name string
		r    fieldmerge.Record
		base int64
		want []string
	}{
		{"current version", r, 6, nil},
		{"after the version", r, 9, nil},
		{"newer paths only", r, 5, []string{"/address/city"}},
		{"removed paths too", r, 4, []string{"/address/city", "/gone"}},
		{"at Since: the paths kept", r, 3, []string{"/address/city", "/gone", "/title"}},
		{"before Since: every leaf too", r, 2, []string{"/address/city", "/address/zip", "/e", "/gone", "/title"}},
		{"Since 0 is the version", withSince(r, 0), 5, []string{"/address/city", "/address/zip", "/e", "/title"}},
		{"Since past the version is the version", withSince(r, 10), 5, []string{"/address/city", "/address/zip", "/e", "/title"}},
		{"unreadable data: the paths kept", fieldmerge.Record{Data: json.RawMessage(`[`), Version: 2, Since: 2, Paths: map[string]int64{"/x": 2}}, 0, []string{"/x"}},
	}
	for _, tt := range tests {
		if got := fieldmerge.ChangedSince(tt.r, tt.base); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ChangedSince(base %d) = %q, want %q", tt.name, tt.base, got, tt.want)
		}
	}
}

func withSince(r fieldmerge.Record, since int64) fieldmerge.Record {
	r.Since = since
	return r
}

func TestDeletes(t *testing.T) {
	t.Parallel()
	r := fieldmerge.Record{Data: json.RawMessage(`{}`), Version: 4, Since: 1}
	for base, want := range map[int64]bool{0: false, 1: false, 3: false, 4: true, 5: true} {
		if got := fieldmerge.Deletes(r, base); got != want {
			t.Errorf("Deletes(version 4, base %d) = %v, want %v", base, got, want)
		}
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	// note is a record made at version 1 whose /title one device changed
	// at version 2.
	note := fieldmerge.Record{
		Data:    json.RawMessage(`{"title":"A","body":"b","address":{"city":"Paris","zip":"75001"}}`),
		Version: 2, Since: 1,
		Paths: map[string]int64{"/title": 2},
	}
	tests := []struct {
		name      string
		r         fieldmerge.Record
		u         fieldmerge.Update
		conflicts []string // nil: the update applies
		changed   []string
		data      string           // on apply; "" keeps r.Data as it is
		paths     map[string]int64 // on apply
		since     int64            // on apply; 0: r.Since
	}{{
		name:    "disjoint fields merge",
		r:       note,
		u:       upd(1, `{"title":"t","body":"B","address":{"city":"Paris","zip":"75001"}}`, "/body"),
		changed: []string{"/body"},
		data:    `{"address":{"city":"Paris","zip":"75001"},"body":"B","title":"A"}`,
		paths:   map[string]int64{"/title": 2, "/body": 3},
	}, {
		name: "nested siblings merge",
		r: fieldmerge.Record{Data: json.RawMessage(`{"address":{"city":"Lyon","zip":"z"}}`), Version: 2, Since: 1,
			Paths: map[string]int64{"/address/city": 2}},
		u:       upd(1, `{"address":{"city":"Paris","zip":"69001"}}`, "/address/zip"),
		changed: []string{"/address/zip"},
		data:    `{"address":{"city":"Lyon","zip":"69001"}}`,
		paths:   map[string]int64{"/address/city": 2, "/address/zip": 3},
	}, {
		name:      "same path, another value: that path alone conflicts",
		r:         note,
		u:         upd(1, `{"title":"B","body":"B2","address":{"city":"Paris","zip":"75001"}}`, "/title", "/body"),
		conflicts: []string{"/title"},
		changed:   []string{"/body", "/title"},
	}, {
		name:    "same path, same value: no conflict",
		r:       note,
		u:       upd(1, `{"title":"A","body":"b","address":{"city":"Paris","zip":"75001"}}`, "/title"),
		changed: nil,
		paths:   map[string]int64{"/title": 2},
	}, {
		name: "same removal: no conflict",
		r: fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 3, Since: 1,
			Paths: map[string]int64{"/gone": 3}},
		u:     upd(1, `{"a":1}`, "/gone"),
		paths: map[string]int64{"/gone": 3},
	}, {
		name: "a parent over a changed child conflicts",
		r: fieldmerge.Record{Data: json.RawMessage(`{"address":{"city":"Lyon","zip":"z"}}`), Version: 2, Since: 1,
			Paths: map[string]int64{"/address/city": 2}},
		u:         upd(1, `{"address":{}}`, "/address"),
		conflicts: []string{"/address"},
		changed:   []string{"/address"},
	}, {
		name: "a child under a changed parent conflicts",
		r: fieldmerge.Record{Data: json.RawMessage(`{"address":"somewhere"}`), Version: 2, Since: 1,
			Paths: map[string]int64{"/address": 2}},
		u:         upd(1, `{"address":{"city":"Paris","zip":"z"}}`, "/address/zip"),
		conflicts: []string{"/address/zip"},
		changed:   []string{"/address/zip"},
	}, {
		name: "a member with '/' in its name is no child",
		r: fieldmerge.Record{Data: json.RawMessage(`{"a/b":1,"a":{"b":1}}`), Version: 2, Since: 1,
			Paths: map[string]int64{"/a~1b": 2}},
		u:       upd(1, `{"a/b":1,"a":{"b":2}}`, "/a/b"),
		changed: []string{"/a/b"},
		data:    `{"a":{"b":2},"a/b":1}`,
		paths:   map[string]int64{"/a~1b": 2, "/a/b": 3},
	}, {
		name:      "every conflicting path, sorted",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"a":1,"b":1,"c":1}`), Version: 3, Since: 1, Paths: map[string]int64{"/c": 2, "/a": 3}},
		u:         upd(1, `{"a":2,"b":2,"c":2}`, "/c", "/b", "/a"),
		conflicts: []string{"/a", "/c"},
		changed:   []string{"/a", "/b", "/c"},
	}, {
		name:    "a change older than the base does not conflict",
		r:       note,
		u:       upd(2, `{"title":"C","body":"b","address":{"city":"Paris","zip":"75001"}}`, "/title"),
		changed: []string{"/title"},
		data:    `{"address":{"city":"Paris","zip":"75001"},"body":"b","title":"C"}`,
		paths:   map[string]int64{"/title": 3},
	}, {
		name:    "remove",
		r:       note,
		u:       upd(2, `{"title":"A","address":{"city":"Paris","zip":"75001"}}`, "/body"),
		changed: []string{"/body"},
		data:    `{"address":{"city":"Paris","zip":"75001"},"title":"A"}`,
		paths:   map[string]int64{"/title": 2, "/body": 3},
	}, {
		name:    "remove the last member of an object keeps the object",
		r:       note,
		u:       upd(2, `{"title":"A","body":"b","address":{"city":"Paris"}}`, "/address/zip"),
		changed: []string{"/address/zip"},
		data:    `{"address":{"city":"Paris"},"body":"b","title":"A"}`,
		paths:   map[string]int64{"/title": 2, "/address/zip": 3},
	}, {
		name:    "a scalar replaced by an object",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"a":1,"b":1}`), Version: 1, Since: 1},
		u:       upd(1, `{"a":{"x":2},"b":1}`, "/a/x"),
		changed: []string{"/a/x"},
		data:    `{"a":{"x":2},"b":1}`,
		paths:   map[string]int64{"/a/x": 2},
	}, {
		name:    "new nested field creates its objects",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"b":1}`), Version: 1, Since: 1},
		u:       upd(1, `{"a":{"x":{"y":"<&>"}},"b":1}`, "/a/x/y"),
		changed: []string{"/a/x/y"},
		data:    `{"a":{"x":{"y":"<&>"}},"b":1}`,
		paths:   map[string]int64{"/a/x/y": 2},
	}, {
		name: "a parent's stamp covers its children's",
		r: fieldmerge.Record{Data: json.RawMessage(`{"address":{"city":"c","zip":"z"},"title":"t"}`), Version: 3, Since: 1,
			Paths: map[string]int64{"/address/city": 2, "/address/zip": 3, "/title": 2}},
		u:       upd(3, `{"address":"elsewhere","title":"t"}`, "/address"),
		changed: []string{"/address"},
		data:    `{"address":"elsewhere","title":"t"}`,
		paths:   map[string]int64{"/address": 4, "/title": 2},
	}, {
		name: "stamps at Since or before are dropped",
		r: fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 4, Since: 3,
			Paths: map[string]int64{"/old": 2, "/at": 3, "/a": 4}},
		u:       upd(4, `{"a":1,"b":2}`, "/b"),
		changed: []string{"/b"},
		data:    `{"a":1,"b":2}`,
		paths:   map[string]int64{"/a": 4, "/b": 5},
	}, {
		name:    "duplicate and unsorted paths",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"a":1,"b":1}`), Version: 1, Since: 1},
		u:       upd(1, `{"a":2,"b":2}`, "/b", "/a", "/b"),
		changed: []string{"/a", "/b"},
		data:    `{"a":2,"b":2}`,
		paths:   map[string]int64{"/a": 2, "/b": 2},
	}, {
		name:    "numbers as written",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"n":1}`), Version: 1, Since: 1},
		u:       upd(1, `{"n":1.0}`, "/n"),
		changed: []string{"/n"},
		data:    `{"n":1.0}`,
		paths:   map[string]int64{"/n": 2},
	}, {
		name:    "no paths: nothing changes but the version",
		r:       note,
		u:       upd(1, `{"title":"Z"}`),
		changed: nil,
		paths:   map[string]int64{"/title": 2},
	}, {
		// Base before Since: the update never saw this life of the record.
		name:      "before Since: a differing leaf conflicts",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"title":"t","n":1}`), Version: 1, Since: 1},
		u:         upd(0, `{"title":"u","n":1}`, "/n", "/title"),
		conflicts: []string{"/title"},
		changed:   []string{"/title"},
	}, {
		name:    "before Since: an equal leaf applies",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"title":"t","n":1}`), Version: 1, Since: 1},
		u:       upd(0, `{"title":"t"}`, "/title"),
		changed: nil,
	}, {
		name:    "two devices create the same id with disjoint fields",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"title":"t","tags":["x"]}`), Version: 1, Since: 1},
		u:       upd(0, `{"color":"red","size":{"w":2}}`, "/color", "/size/w"),
		changed: []string{"/color", "/size/w"},
		data:    `{"color":"red","size":{"w":2},"tags":["x"],"title":"t"}`,
		paths:   map[string]int64{"/color": 2, "/size/w": 2},
	}, {
		name:      "before Since: a child of a leaf conflicts",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 1, Since: 1},
		u:         upd(0, `{"a":{"x":1}}`, "/a/x"),
		conflicts: []string{"/a/x"},
		changed:   []string{"/a/x"},
	}, {
		name:      "before Since: a parent of a leaf conflicts",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"a":{"x":1}}`), Version: 1, Since: 1},
		u:         upd(0, `{"a":2}`, "/a"),
		conflicts: []string{"/a"},
		changed:   []string{"/a"},
	}, {
		name: "before Since: a field removed after Since conflicts",
		r: fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 3, Since: 2,
			Paths: map[string]int64{"/b": 3}},
		u:         upd(1, `{"a":1,"b":5}`, "/b"),
		conflicts: []string{"/b"},
		changed:   []string{"/b"},
	}, {
		name:      "Since 0 is the version: every leaf may be new",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"title":"t","body":"b"}`), Version: 5},
		u:         upd(4, `{"title":"t","body":"B"}`, "/body"),
		conflicts: []string{"/body"},
		changed:   []string{"/body"},
	}, {
		name:    "Since 0 on the current version applies and keeps the version as Since",
		r:       fieldmerge.Record{Data: json.RawMessage(`{"title":"t","body":"b"}`), Version: 5},
		u:       upd(5, `{"title":"t","body":"B"}`, "/body"),
		changed: []string{"/body"},
		data:    `{"body":"B","title":"t"}`,
		paths:   map[string]int64{"/body": 6},
		since:   5,
	}, {
		name:      "Since past the version is the version",
		r:         fieldmerge.Record{Data: json.RawMessage(`{"n":1}`), Version: 3, Since: 9},
		u:         upd(2, `{"n":2}`, "/n"),
		conflicts: []string{"/n"},
		changed:   []string{"/n"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := cloneRecord(tt.r)
			res, err := fieldmerge.Merge(tt.r, tt.u)
			if err != nil {
				t.Fatalf("Merge: %v", err)
			}
			if !slices.Equal(res.Conflicts, tt.conflicts) {
				t.Errorf("Conflicts = %q, want %q", res.Conflicts, tt.conflicts)
			}
			if !slices.Equal(res.Changed, tt.changed) {
				t.Errorf("Changed = %q, want %q", res.Changed, tt.changed)
			}
			if !sameRecord(tt.r, before) {
				t.Errorf("Merge changed its record argument: %+v, was %+v", tt.r, before)
			}
			if tt.conflicts != nil {
				if !sameRecord(res.Record, tt.r) {
					t.Errorf("on a conflict Record = %+v, want the record unchanged %+v", res.Record, tt.r)
				}
				return
			}
			got := res.Record
			if got.Version != tt.r.Version+1 {
				t.Errorf("Version = %d, want %d", got.Version, tt.r.Version+1)
			}
			wantData := tt.data
			if wantData == "" {
				wantData = string(tt.r.Data)
			}
			if string(got.Data) != wantData {
				t.Errorf("Data = %s, want %s", got.Data, wantData)
			}
			if !maps.Equal(got.Paths, tt.paths) {
				t.Errorf("Paths = %v, want %v", got.Paths, tt.paths)
			}
			if want := cmp.Or(tt.since, tt.r.Since); got.Since != want {
				t.Errorf("Since = %d, want %d", got.Since, want)
			}
		})
	}
}

func TestMergeInvalid(t *testing.T) {
	t.Parallel()
	good := fieldmerge.Record{Data: json.RawMessage(`{"a":1}`), Version: 1, Since: 1}
	for _, bad := range badObjects {
		r := good
		r.Data = json.RawMessage(bad)
		if _, err := fieldmerge.Merge(r, upd(1, `{"a":2}`, "/a")); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("record data %q: %v, want ErrInvalid", bad, err)
		}
		if _, err := fieldmerge.Merge(good, fieldmerge.Update{Base: 1, Paths: []string{"/a"}, Data: json.RawMessage(bad)}); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("update data %q: %v, want ErrInvalid", bad, err)
		}
	}
	for _, bad := range []string{"", "a", "/a~2", "/a~"} {
		if _, err := fieldmerge.Merge(good, upd(1, `{"a":2}`, "/a", bad)); !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("path %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// upd is an update made on base, of data, changing paths.
func upd(base int64, data string, paths ...string) fieldmerge.Update {
	return fieldmerge.Update{Base: base, Paths: paths, Data: json.RawMessage(data)}
}

func cloneRecord(r fieldmerge.Record) fieldmerge.Record {
	r.Data = slices.Clone(r.Data)
	r.Paths = maps.Clone(r.Paths)
	return r
}

func sameRecord(a, b fieldmerge.Record) bool {
	return string(a.Data) == string(b.Data) && a.Version == b.Version && a.Since == b.Since && maps.Equal(a.Paths, b.Paths)
}

// TestPathsThroughNonObjects: a path that leads through a value of the
// update's data that is not an object names no field: fieldmerge.ErrInvalidPath.
// One under another path of the update is covered by it.
func TestPathsThroughNonObjects(t *testing.T) {
	rec := fieldmerge.Record{Data: json.RawMessage(`{"tags":["a"],"title":"x","a":{"b":1}}`), Version: 1, Since: 1}
	for _, p := range []string{"/tags/0", "/title/x", "/a/b/c"} {
		_, err := fieldmerge.Merge(rec, fieldmerge.Update{Base: 1, Paths: []string{p}, Data: rec.Data})
		if !errors.Is(err, fieldmerge.ErrInvalidPath) || !errors.Is(err, fieldmerge.ErrInvalid) {
			t.Errorf("path %s: %v, want fieldmerge.ErrInvalidPath", p, err)
		}
	}
	// A member missing on the way removes what is there.
	res, err := fieldmerge.Merge(rec, fieldmerge.Update{Base: 1, Paths: []string{"/a/b"}, Data: json.RawMessage(`{"tags":["a"],"title":"x"}`)})
	if err != nil || string(res.Record.Data) != `{"a":{},"tags":["a"],"title":"x"}` {
		t.Fatalf("removal: %s %v", res.Record.Data, err)
	}
	// "/a" after "/a/b" (two unsent edits): "/a" covers it.
	res, err = fieldmerge.Merge(rec, fieldmerge.Update{Base: 1, Paths: []string{"/a/b", "/a"}, Data: json.RawMessage(`{"tags":["a"],"title":"x","a":5}`)})
	if err != nil || string(res.Record.Data) != `{"a":5,"tags":["a"],"title":"x"}` || !slices.Equal(res.Changed, []string{"/a"}) {
		t.Fatalf("covered path: %s %v %v", res.Record.Data, res.Changed, err)
	}
	if got := fieldmerge.Cover([]string{"/a/b", "/a!", "/a", "/a", "/b/c"}); !slices.Equal(got, []string{"/a", "/a!", "/b/c"}) {
		t.Fatalf("Cover: %q", got)
	}
}

// TestFitClipAndPrune: paths over the limits are made coarser (or not
// at all when nothing fits); Clip names the scalar a path leads through;
// path versions stay bounded, raising Since.
func TestFitClipAndPrune(t *testing.T) {
	long := "/" + strings.Repeat("x", fieldmerge.MaxPathBytes)
	if got, ok := fieldmerge.Fit([]string{"/a" + long, "/b"}); !ok || !slices.Equal(got, []string{"/a", "/b"}) {
		t.Errorf("a long path: %q %v", got, ok)
	}
	var deep []string
	for i := range fieldmerge.MaxPaths + 1 {
		deep = append(deep, fmt.Sprintf("/o/f%d", i))
	}
	if got, ok := fieldmerge.Fit(deep); !ok || !slices.Equal(got, []string{"/o"}) {
		t.Errorf("1,001 fields under /o: %q %v", got, ok)
	}
	var flat []string
	for i := range fieldmerge.MaxPaths + 1 {
		flat = append(flat, fmt.Sprintf("/f%d", i))
	}
	if _, ok := fieldmerge.Fit(flat); ok {
		t.Error("1,001 top-level fields fit")
	}
	if got := fieldmerge.Clip([]string{"/a/b", "/o/x/y", "/m/n"}, json.RawMessage(`{"a":5,"o":{"x":[1]}}`)); !slices.Equal(got, []string{"/a", "/m/n", "/o/x"}) {
		t.Errorf("Clip: %q", got)
	}

	rec := fieldmerge.Record{Data: json.RawMessage(`{}`), Version: 1, Since: 1}
	var last []string
	for v := range 3 {
		var paths []string
		data := map[string]int{}
		for i := range fieldmerge.MaxPathVersions / 2 {
			p := fmt.Sprintf("f%d_%d", v, i)
			paths = append(paths, "/"+p)
			data[p] = i
		}
		raw, _ := json.Marshal(data)
		// Each write sets 500 new fields and removes the last 500.
		res, err := fieldmerge.Merge(rec, fieldmerge.Update{Base: rec.Version, Paths: append(slices.Clone(paths), last...), Data: raw})
		if err != nil || len(res.Conflicts) > 0 {
			t.Fatalf("write %d: %v %v", v, res.Conflicts, err)
		}
		rec, last = res.Record, paths
	}
	if len(rec.Paths) > fieldmerge.MaxPathVersions || rec.Since <= 1 {
		t.Fatalf("%d path versions, since %d: not bounded", len(rec.Paths), rec.Since)
	}
}
