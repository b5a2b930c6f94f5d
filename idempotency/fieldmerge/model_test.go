package fieldmerge_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// TestMergeModel runs a record through a history of writes from devices
// that each took a snapshot of it at some version (or none: a device that
// created the same record on its own, base 0) and later send a merge
// patch made on that snapshot, with now and then a write that replaces
// the whole data. A plain model decides each update independently:
//
//   - a path of the update whose value differs from the current one
//     conflicts when it overlaps a path changed after the update's base
//     in the record's current life, or, for a base before that life, any
//     leaf the record holds;
//   - a conflict changes nothing; otherwise every changed path takes the
//     update's value, every other path keeps exactly what it held, and
//     the version grows by one.
//
// The model keeps the version of each path's latest change in a plain
// map, never pruned, and the data of every version.
func TestMergeModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		schema := rapid.SliceOfNDistinct(rapid.SampledFrom(universe()), 1, 6, tokPath.String).Draw(rt, "schema")
		// Every path a patch may name: the schema's leaves, and the
		// objects above its nested ones (set whole to a scalar, or removed).
		targets := slices.Clone(schema)
		for _, p := range schema {
			if len(p) > 1 && !slices.ContainsFunc(targets, func(q tokPath) bool { return q.String() == p[:1].String() }) {
				targets = append(targets, p[:1])
			}
		}

		first := rapid.Int64Range(1, 3).Draw(rt, "first version")
		m := &model{
			version: first, since: first,
			data:    drawData(rt, schema, "initial data"),
			changed: map[string]stamp{},
			history: map[int64]map[string]any{},
		}
		m.history[first] = m.data
		rec := fieldmerge.Record{Data: encodeJSON(rt, m.data), Version: first, Since: first}
		if rapid.Bool().Draw(rt, "stored before path versions") {
			rec.Since = 0 // read as Version
		}

		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				if rapid.IntRange(0, 19).Draw(rt, "kind") == 0 {
					rec = m.replace(rt, rec, schema)
					return
				}
				rec = m.update(rt, rec, targets)
			},
			"": func(rt *rapid.T) {
				if rec.Version != m.version {
					rt.Fatalf("version %d, model %d", rec.Version, m.version)
				}
				if got := decodeJSON(rt, rec.Data); !reflect.DeepEqual(got, m.data) {
					rt.Fatalf("data %s, model %s", rec.Data, encodeJSON(rt, m.data))
				}
			},
		})
	})
}

// model is the record as the test expects it.
type model struct {
	version, since int64
	data           map[string]any
	changed        map[string]stamp // path → its latest change
	history        map[int64]map[string]any
}

type stamp struct {
	path    tokPath
	version int64
}

// conflicts reports whether a change of p made on base conflicts. The
// stamps of an earlier life do not count: a whole-data write starts the
// record's life again and stands, by the package's rule, for a change of
// every leaf it holds (Record.Since), not of what it removed.
func (m *model) conflicts(p tokPath, base int64) bool {
	if base < m.since {
		for _, l := range leavesOf(m.data, nil) {
			if overlap(p, l) {
				return true
			}
		}
	}
	for _, s := range m.changed {
		if s.version > base && s.version > m.since && overlap(p, s.path) {
			return true
		}
	}
	return false
}

func (m *model) replace(rt *rapid.T, rec fieldmerge.Record, schema []tokPath) fieldmerge.Record {
	data := drawData(rt, schema, "replacing data")
	next := fieldmerge.Replace(rec, encodeJSON(rt, data))
	m.version++
	m.since = m.version
	m.data = data
	m.history[m.version] = data
	if next.Version != m.version || next.Since != m.version || next.Paths != nil {
		rt.Fatalf("Replace: version %d since %d paths %v; want version and since %d, no paths", next.Version, next.Since, next.Paths, m.version)
	}
	return next
}

func (m *model) update(rt *rapid.T, rec fieldmerge.Record, targets []tokPath) fieldmerge.Record {
	// Mostly a version of the record's current life; now and then one
	// before it (a whole-data write came since), or none.
	var base int64
	switch rapid.IntRange(0, 7).Draw(rt, "base kind") {
	case 0:
		base = 0
	case 1:
		base = rapid.SampledFrom(slices.Sorted(maps.Keys(m.history))).Draw(rt, "any base")
	default:
		base = rapid.Int64Range(m.since, m.version).Draw(rt, "base")
	}
	snapshot := m.history[base]
	if snapshot == nil {
		snapshot = map[string]any{}
	}

	// The device's change: a merge patch on its snapshot, on paths that
	// do not overlap one another.
	var ops []tokPath
	patch := map[string]any{}
	for _, i := range rapid.Permutation(indexes(len(targets))).Draw(rt, "order") {
		p := targets[i]
		what := rapid.IntRange(0, 8).Draw(rt, "op "+p.String()) // 0-4 none, 5 remove, else set
		if what < 5 || slices.ContainsFunc(ops, func(q tokPath) bool { return overlap(p, q) }) {
			continue
		}
		var v any // null: remove
		if what > 5 {
			v = rapid.SampledFrom(scalars).Draw(rt, "value "+p.String())
		}
		ops = append(ops, p)
		patch = withPath(patch, p, v, true)
	}
	rawPatch := encodeJSON(rt, patch)
	paths, err := fieldmerge.PatchPaths(rawPatch)
	if err != nil {
		rt.Fatalf("PatchPaths(%s): %v", rawPatch, err)
	}
	slices.SortFunc(ops, func(a, b tokPath) int { return strings.Compare(a.String(), b.String()) })
	if want := strs(ops); !slices.Equal(paths, want) {
		rt.Fatalf("PatchPaths(%s) = %q, want %q", rawPatch, paths, want)
	}
	sent, ok := mergePatch(snapshot, patch).(map[string]any)
	if !ok {
		rt.Fatalf("merge patch of an object is not an object")
	}
	u := fieldmerge.Update{Base: base, Paths: paths, Data: encodeJSON(rt, sent)}

	m.checkChangedSince(rt, rec, base)
	if got, want := fieldmerge.Deletes(rec, base), base >= m.version; got != want {
		rt.Fatalf("Deletes(version %d, base %d) = %v", rec.Version, base, got)
	}

	// What the model expects.
	var changed []tokPath
	var wantConflicts []string
	for _, p := range ops {
		want, wantOK := lookup(sent, p)
		have, haveOK := lookup(m.data, p)
		if wantOK == haveOK && (!wantOK || reflect.DeepEqual(want, have)) {
			continue
		}
		changed = append(changed, p)
		if m.conflicts(p, base) {
			wantConflicts = append(wantConflicts, p.String())
		}
	}

	before := cloneRecord(rec)
	res, err := fieldmerge.Merge(rec, u)
	if err != nil {
		rt.Fatalf("Merge(%+v, base %d paths %q data %s): %v", rec, base, paths, u.Data, err)
	}
	if again, err := fieldmerge.Merge(rec, u); err != nil || !reflect.DeepEqual(again, res) {
		rt.Fatalf("Merge is not deterministic: %+v then %+v, %v", res, again, err)
	}
	if !sameRecord(rec, before) {
		rt.Fatalf("Merge changed its record argument")
	}
	if !slices.Equal(res.Changed, strs(changed)) {
		rt.Fatalf("Changed = %q, model %q (record %s, update base %d %s on %q)", res.Changed, strs(changed), rec.Data, base, u.Data, paths)
	}
	if !slices.Equal(res.Conflicts, wantConflicts) {
		rt.Fatalf("Conflicts = %q, model %q (record %s version %d since %d paths %v, update base %d %s on %q)",
			res.Conflicts, wantConflicts, rec.Data, rec.Version, rec.Since, rec.Paths, base, u.Data, paths)
	}
	if len(wantConflicts) > 0 {
		if !sameRecord(res.Record, rec) {
			rt.Fatalf("a conflict changed the record: %+v, was %+v", res.Record, rec)
		}
		return rec
	}

	// It applies.
	old := m.data
	m.version++
	for _, p := range changed {
		v, ok := lookup(sent, p)
		m.data = withPath(m.data, p, v, ok)
		m.changed[p.String()] = stamp{p, m.version}
	}
	m.history[m.version] = m.data

	next := res.Record
	if next.Version != m.version || next.Since != m.since {
		rt.Fatalf("after the update: version %d since %d, want %d and %d", next.Version, next.Since, m.version, m.since)
	}
	if !json.Valid(next.Data) || !bytes.HasPrefix(next.Data, []byte("{")) {
		rt.Fatalf("data %s is not a JSON object", next.Data)
	}
	got := decodeJSON(rt, next.Data)
	for _, p := range changed {
		w, wok := lookup(sent, p)
		g, gok := lookup(got, p)
		if wok != gok || !reflect.DeepEqual(w, g) {
			rt.Fatalf("changed path %s holds %v (%v), the update's value is %v (%v)", p, g, gok, w, wok)
		}
	}
	for _, q := range targets {
		if slices.ContainsFunc(changed, func(p tokPath) bool { return overlap(p, q) }) {
			continue
		}
		o, ook := lookup(old, q)
		g, gok := lookup(got, q)
		if ook != gok || !reflect.DeepEqual(o, g) {
			rt.Fatalf("path %s, not changed, held %v (%v) and now %v (%v)", q, o, ook, g, gok)
		}
	}
	if !reflect.DeepEqual(got, m.data) {
		rt.Fatalf("data %s, model %s", next.Data, encodeJSON(rt, m.data))
	}
	for _, p := range changed {
		if next.Paths[p.String()] != m.version {
			rt.Fatalf("Paths[%s] = %d, want %d", p, next.Paths[p.String()], m.version)
		}
	}
	for q, v := range next.Paths {
		if v <= next.Since || v > next.Version {
			rt.Fatalf("Paths[%s] = %d, outside (since %d, version %d]", q, v, next.Since, next.Version)
		}
	}
	return next
}

// checkChangedSince: ChangedSince(rec, base) names only paths the model
// saw change after base (or, before the record's life, leaves it holds),
// and covers each of those by itself or a parent.
func (m *model) checkChangedSince(rt *rapid.T, rec fieldmerge.Record, base int64) {
	known := map[string]tokPath{}
	var after []tokPath
	for _, s := range m.changed {
		if s.version > base && s.version > m.since {
			known[s.path.String()] = s.path
			after = append(after, s.path)
		}
	}
	if base < m.since {
		for _, l := range leavesOf(m.data, nil) {
			known[l.String()] = l
			after = append(after, l)
		}
	}
	got := fieldmerge.ChangedSince(rec, base)
	var gotTok []tokPath
	for _, g := range got {
		p, ok := known[g]
		if !ok {
			rt.Fatalf("ChangedSince(base %d) = %q: %s did not change after it", base, got, g)
		}
		gotTok = append(gotTok, p)
	}
	for _, q := range after {
		if !slices.ContainsFunc(gotTok, func(g tokPath) bool { return len(g) <= len(q) && slices.Equal(g, q[:len(g)]) }) {
			rt.Fatalf("ChangedSince(base %d) = %q misses %s", base, got, q)
		}
	}
}

// tokPath is a path as its member names.
type tokPath []string

// String is p as a JSON pointer, escaped here rather than by the package.
func (p tokPath) String() string {
	var b strings.Builder
	for _, t := range p {
		b.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// universe is every leaf a schema may hold: top-level members and
// members one level down, some with '/' and '~' in their names, some
// whose pointer begins another's ("/a" and "/ab").
func universe() []tokPath {
	var u []tokPath
	for _, top := range []string{"a", "ab", "c/d", "e~f"} {
		u = append(u, tokPath{top})
		for _, sub := range []string{"x", "x~", "z/w"} {
			u = append(u, tokPath{top, sub})
		}
	}
	return u
}

// scalars are few, so that two writers often set the same value.
var scalars = []any{json.Number("1"), json.Number("1.0"), json.Number("2"), "s", "t", true, false}

// drawData is an object holding some of schema's paths.
func drawData(rt *rapid.T, schema []tokPath, label string) map[string]any {
	data := map[string]any{}
	values := append([]any{nil}, scalars...)
	for _, p := range schema {
		if rapid.Bool().Draw(rt, label+" has "+p.String()) {
			data = withPath(data, p, rapid.SampledFrom(values).Draw(rt, label+" "+p.String()), true)
		}
	}
	return data
}

func indexes(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func strs(ps []tokPath) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func overlap(p, q tokPath) bool {
	n := min(len(p), len(q))
	return slices.Equal(p[:n], q[:n])
}

func lookup(v any, p tokPath) (any, bool) {
	for _, k := range p {
		o, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = o[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// withPath returns a copy of obj with p set to v (ok) or removed (!ok),
// making the objects on the way to a set; obj itself is not changed.
func withPath(obj map[string]any, p tokPath, v any, ok bool) map[string]any {
	out := maps.Clone(obj)
	if out == nil {
		out = map[string]any{}
	}
	if len(p) == 1 {
		if ok {
			out[p[0]] = v
		} else {
			delete(out, p[0])
		}
		return out
	}
	child, isObj := out[p[0]].(map[string]any)
	if !isObj && !ok {
		return out // nothing there to remove
	}
	out[p[0]] = withPath(child, p[1:], v, ok)
	return out
}

// mergePatch applies an RFC 7396 merge patch to target, without changing
// either.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, _ := target.(map[string]any)
	t = maps.Clone(t)
	if t == nil {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = mergePatch(t[k], v)
		}
	}
	return t
}

func leavesOf(obj map[string]any, at tokPath) []tokPath {
	var out []tokPath
	for k, v := range obj {
		p := append(slices.Clip(at), k)
		if o, ok := v.(map[string]any); ok && len(o) > 0 {
			out = append(out, leavesOf(o, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func encodeJSON(rt *rapid.T, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		rt.Fatalf("encode: %v", err)
	}
	return raw
}

func decodeJSON(rt *rapid.T, raw json.RawMessage) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil || v == nil {
		rt.Fatalf("decode %s: %v", raw, err)
	}
	return v
}
