// Package fieldmerge is the field-level merge rule of syncd's remote
// protocol, for a backend that keeps its records in its own tables: given
// what a record stores (its data, its version, and the version at which
// each field last changed) and an update (the version it was made on, the
// fields it changes, its data), it answers the merged record, or the
// fields that conflict.
//
// A field is a path to a leaf of a record's data, written as a JSON
// pointer (RFC 6901: "/title", "/address/city", "~1" for a '/' in a
// member name, "~0" for a '~'). Objects recurse; anything else (a
// string, a number, true, false, null, an array) is a leaf, and so is an
// empty object. Two paths overlap when one is the other or leads into it
// ("/address" overlaps "/address/city"; "/address/city" and
// "/address/zip" do not).
//
// The rule: an update made on base changes paths. A path of it conflicts
// when the value it sets differs from the record's current value there
// and an overlapping path changed after base. With no conflict the
// update applies: each of its paths takes the update's value there, or
// is removed where the update's data has none, and the record's version
// grows by one. With a conflict nothing applies. Two devices that edit
// different fields offline therefore both land; the same field edited
// to different values on both is a conflict on that field alone.
//
// A Record remembers when each path changed (Record.Paths) and when its
// current life began (Record.Since: its create, its revival, or a write
// that replaced its whole data): every path not in Paths changed at
// Since or before. An update made before Since (base < Since) conflicts
// on every path where its value differs from the record's and that
// overlaps a path the record holds; a path the record does not hold
// merges (two devices that created one id with different fields, say).
// So a field a whole-data write removed comes back when a device that
// had not seen that write edits it.
//
// The package works on encoding/json values. Numbers are kept as
// written (json.Number), so "1.0" and "1" are different values.
package fieldmerge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Limits of an update's paths, checked by ParsePaths.
const (
	// MaxPaths bounds how many paths one update may name.
	MaxPaths = 1000
	// MaxPathBytes bounds one path's length.
	MaxPathBytes = 1024
)

// ErrInvalid is wrapped by the errors of malformed input: data that is
// not a JSON object, a path that is not a JSON pointer.
var ErrInvalid = errors.New("fieldmerge: invalid input")

// ErrInvalidPath wraps ErrInvalid for an update's path that leads
// through a value of its data that is not an object ("/tags/0" where
// tags is an array, "/title/x" where title is a string): it names no
// field, and would change nothing.
var ErrInvalidPath = fmt.Errorf("%w: a path leads through a value that is not an object", ErrInvalid)

// Record is what the rule needs of a stored record.
type Record struct {
	// Data is the record's data, a JSON object.
	Data json.RawMessage
	// Version is the record's version: it grows by one per write.
	Version int64
	// Since is the version at which the record's current life began:
	// its create, its revival after a deletion, or a write that replaced
	// its whole data. 0 is read as Version (a record stored before path
	// versions were kept: every path may have changed at its latest
	// write).
	Since int64
	// Paths holds, for the paths that changed after Since, the version
	// of their latest change.
	Paths map[string]int64
}

// since returns r.Since, or r.Version when none is kept.
func (r Record) since() int64 {
	if r.Since <= 0 || r.Since > r.Version {
		return r.Version
	}
	return r.Since
}

// Update is one write to merge into a record.
type Update struct {
	// Base is the version of the record the change was made on.
	Base int64
	// Paths are the paths the change sets or removes.
	Paths []string
	// Data is the writer's whole data after the change: each path takes
	// its value from here (or is removed where Data has none).
	Data json.RawMessage
}

// Result is what Merge answers.
type Result struct {
	// Record is the record after the update: unchanged when Conflicts is
	// not empty.
	Record Record
	// Conflicts are the update's paths that conflict, sorted. Empty:
	// the update applied.
	Conflicts []string
	// Changed are the update's paths whose value changed, sorted.
	Changed []string
}

// Merge applies u to r by the package's rule. It returns an error
// wrapping ErrInvalid when r's or u's data is not a JSON object or a path
// is not a JSON pointer.
func Merge(r Record, u Update) (Result, error) {
	cur, err := decodeObject(r.Data)
	if err != nil {
		return Result{}, fmt.Errorf("%w: the record's data: %v", ErrInvalid, err)
	}
	src, err := decodeObject(u.Data)
	if err != nil {
		return Result{}, fmt.Errorf("%w: the update's data: %v", ErrInvalid, err)
	}
	paths := Cover(u.Paths)
	toks := make([][]string, len(paths))
	for i, p := range paths {
		if toks[i], err = split(p); err != nil {
			return Result{}, err
		}
	}
	for i, p := range paths {
		if through(src, toks[i]) {
			return Result{}, fmt.Errorf("%w: %q", ErrInvalidPath, p)
		}
	}
	var res Result
	var changed [][]string
	var leaves [][]string // the record's leaves, when the base is before Since
	for i, p := range paths {
		want, wantOK := lookup(src, toks[i])
		have, haveOK := lookup(cur, toks[i])
		if wantOK == haveOK && (!wantOK || equal(want, have)) {
			continue
		}
		res.Changed = append(res.Changed, p)
		changed = append(changed, toks[i])
		if u.Base < r.since() {
			if leaves == nil {
				leaves = leafTokens(cur, nil, [][]string{})
			}
			if overlapsAny(toks[i], leaves) {
				res.Conflicts = append(res.Conflicts, p)
				continue
			}
		}
		for q, v := range r.Paths {
			if v > u.Base && overlaps(p, q) {
				res.Conflicts = append(res.Conflicts, p)
				break
			}
		}
	}
	if len(res.Conflicts) > 0 {
		res.Record = r
		return res, nil
	}
	next := r
	next.Version = r.Version + 1
	if next.Since <= 0 || next.Since > r.Version {
		next.Since = r.since()
	}
	next.Paths = make(map[string]int64, len(r.Paths)+len(res.Changed))
	for q, v := range r.Paths {
		if v > next.Since {
			next.Paths[q] = v
		}
	}
	for i, p := range res.Changed {
		v, ok := lookup(src, changed[i])
		cur = set(cur, changed[i], v, ok)
		// A path's stamp covers the paths under it: they need no entry.
		for q := range next.Paths {
			if q != p && strings.HasPrefix(q, p+"/") {
				delete(next.Paths, q)
			}
		}
		next.Paths[p] = next.Version
	}
	prune(&next)
	if len(next.Paths) == 0 {
		next.Paths = nil
	}
	if len(res.Changed) == 0 {
		next.Data = r.Data
	} else if next.Data, err = encode(cur); err != nil {
		return Result{}, err
	}
	res.Record = next
	return res, nil
}

// MaxPathVersions bounds the path versions a record keeps (Record.Paths).
// Past it, the oldest are dropped and Since rises to the newest version
// dropped: those paths count as changed at Since, which a base before it
// conflicts on where the record holds them (more conflicts, none
// missed). A field removed before then, which the record no longer
// holds, is no longer remembered: a writer whose base is older sets it
// again. Without a bound, a record whose fields come and go (500 set,
// 500 removed, 40 times) kept 20,000 versions and each write compared
// every changed path with all of them.
const MaxPathVersions = 1000

// prune keeps r.Paths within MaxPathVersions: the oldest go, down to
// half of it, and Since rises to the newest version gone.
func prune(r *Record) {
	if len(r.Paths) <= MaxPathVersions {
		return
	}
	vs := make([]int64, 0, len(r.Paths))
	for _, v := range r.Paths {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	cut := vs[len(vs)-MaxPathVersions/2-1] // the newest version dropped
	for q, v := range r.Paths {
		if v <= cut {
			delete(r.Paths, q)
		}
	}
	r.Since = max(r.Since, cut)
}

// Replace is the record after a write that replaces its whole data (a
// record-level write, or a revival): its life starts again at the next
// version, with no path versions.
func Replace(r Record, data json.RawMessage) Record {
	return Record{Data: data, Version: r.Version + 1, Since: r.Version + 1}
}

// ChangedSince returns the paths of r that changed after base, sorted:
// those in r.Paths newer than base, and, when base is before r.Since,
// every leaf of r's data. A delete made on base conflicts when it is not
// empty (or when r is past base at all: see Deletes).
func ChangedSince(r Record, base int64) []string {
	var out []string
	if base < r.since() {
		if cur, err := decodeObject(r.Data); err == nil {
			for _, t := range leafTokens(cur, nil, nil) {
				out = append(out, join(t))
			}
		}
	}
	for q, v := range r.Paths {
		if v > base {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Deletes reports whether a delete made on base applies to r: only when
// nothing changed after base (r.Version <= base). A delete on a base
// that others edited since is a conflict, on ChangedSince(r, base).
func Deletes(r Record, base int64) bool { return base >= r.Version }

// PatchPaths returns the paths an RFC 7396 merge patch changes, sorted:
// each member whose value is not an object is a path (a null removes
// it); an object recurses into its members (an empty one is a path). An
// empty patch changes none: an empty list, not nil.
func PatchPaths(patch json.RawMessage) ([]string, error) {
	obj, err := decodeObject(patch)
	if err != nil {
		return nil, fmt.Errorf("%w: the patch: %v", ErrInvalid, err)
	}
	out := []string{} // an empty patch changes no field: not nil, the whole data
	for _, t := range leafTokens(obj, nil, nil) {
		out = append(out, join(t))
	}
	slices.Sort(out)
	return out, nil
}

// Fits reports whether paths are within the limits ParsePaths checks.
func Fits(paths []string) bool {
	if len(paths) > MaxPaths {
		return false
	}
	for _, p := range paths {
		if len(p) > MaxPathBytes {
			return false
		}
	}
	return true
}

// Fit returns paths within the limits ParsePaths checks, made coarser
// where they are not: a path over MaxPathBytes becomes its longest
// prefix that fits, and while there are more than MaxPaths, the deepest
// ones become their parents. A coarser path names more of the record
// (the whole of its subtree, from the writer's data), so a merging
// server may find more conflicts, never fewer, and nothing of another
// writer is overwritten silently. ok is false when no coarsening fits
// (more than MaxPaths top-level members, or one longer than MaxPathBytes).
func Fit(paths []string) (out []string, ok bool) {
	if Fits(paths) {
		return paths, true
	}
	toks := make([][]string, 0, len(paths))
	for _, p := range paths {
		t, err := split(p)
		if err != nil {
			return nil, false
		}
		for len(t) > 0 && len(join(t)) > MaxPathBytes {
			t = t[:len(t)-1]
		}
		if len(t) == 0 {
			return nil, false
		}
		toks = append(toks, t)
	}
	for {
		strs := make([]string, len(toks))
		depth := 0
		for i, t := range toks {
			strs[i] = join(t)
			depth = max(depth, len(t))
		}
		out = Cover(strs)
		if len(out) <= MaxPaths {
			return out, true
		}
		if depth <= 1 {
			return nil, false
		}
		for i, t := range toks {
			if len(t) == depth {
				toks[i] = t[:depth-1]
			}
		}
	}
}

// Clip returns paths with each one that leads through a value of data
// that is not an object (a string, a number, an array, null) cut at that
// value: "/a/b" where a is 5 names /a, the field that changed when a
// patch made it an object. A member missing on the way cuts nothing.
// The result is Cover'ed.
func Clip(paths []string, data json.RawMessage) []string {
	obj, err := decodeObject(data)
	if err != nil {
		return Cover(paths)
	}
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		t, err := split(p)
		if err != nil {
			out = append(out, p)
			continue
		}
		var v any = obj
		n := len(t)
		for i, k := range t[:len(t)-1] {
			o, ok := v.(map[string]any)
			if !ok {
				n = i
				break
			}
			if v, ok = o[k]; !ok {
				break
			}
			if _, isObj := v.(map[string]any); !isObj {
				n = i + 1
				break
			}
		}
		out = append(out, join(t[:n]))
	}
	return Cover(out)
}

// LeafPaths returns every leaf path of data, sorted: the paths a create
// sets.
func LeafPaths(data json.RawMessage) ([]string, error) { return PatchPaths(data) }

// Diff returns the paths where a and b differ, sorted: where both hold
// an object it recurses, anything else that differs (a member on one
// side only, another value) is one path.
func Diff(a, b json.RawMessage) ([]string, error) {
	x, err := decodeObject(a)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	y, err := decodeObject(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var out []string
	diff(x, y, nil, &out)
	slices.Sort(out)
	return out, nil
}

func diff(x, y map[string]any, at []string, out *[]string) {
	for k, xv := range x {
		p := append(slices.Clip(at), k)
		yv, ok := y[k]
		if !ok {
			*out = append(*out, join(p))
			continue
		}
		xo, xok := xv.(map[string]any)
		yo, yok := yv.(map[string]any)
		if xok && yok && len(xo) > 0 && len(yo) > 0 {
			diff(xo, yo, p, out)
			continue
		}
		if !equal(xv, yv) {
			*out = append(*out, join(p))
		}
	}
	for k := range y {
		if _, ok := x[k]; !ok {
			*out = append(*out, join(append(slices.Clip(at), k)))
		}
	}
}

// Get returns the value at path in data, and whether there is one.
func Get(data json.RawMessage, path string) (json.RawMessage, bool, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	t, err := split(path)
	if err != nil {
		return nil, false, err
	}
	v, ok := lookup(obj, t)
	if !ok {
		return nil, false, nil
	}
	raw, err := encode(v)
	return raw, true, err
}

// Apply returns dst with each of paths set to src's value there, or
// removed where src has none: an update's effect without the rule's
// check. It lays pending local edits over a newer server record.
func Apply(dst, src json.RawMessage, paths []string) (json.RawMessage, error) {
	d, err := decodeObject(dst)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	s, err := decodeObject(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	ps := slices.Clone(paths)
	slices.Sort(ps)
	for _, p := range slices.Compact(ps) {
		t, err := split(p)
		if err != nil {
			return nil, err
		}
		v, ok := lookup(s, t)
		d = set(d, t, v, ok)
	}
	return encode(d)
}

// Cover returns paths sorted, without repeats, and without the paths
// another of them leads into ("/a/b" beside "/a"): the same fields.
func Cover(paths []string) []string {
	out := slices.Clone(paths)
	slices.Sort(out)
	out = slices.Compact(out)
	// Sorted, a path's descendants follow it, though not always at once
	// ("/a", "/a!", "/a/b"): each is checked against the kept ones.
	kept := out[:0]
	for _, p := range out {
		covered := false
		for _, q := range kept {
			if strings.HasPrefix(p, q+"/") {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, p)
		}
	}
	return kept
}

// Overlaps reports whether paths p and q overlap: one is the other, or
// leads into it.
func Overlaps(p, q string) bool { return overlaps(p, q) }

func overlaps(p, q string) bool {
	if len(p) > len(q) {
		p, q = q, p
	}
	return q == p || strings.HasPrefix(q, p) && q[len(p)] == '/'
}

func overlapsAny(t []string, set [][]string) bool {
	for _, s := range set {
		n := min(len(t), len(s))
		if slices.Equal(t[:n], s[:n]) {
			return true
		}
	}
	return false
}

// ParsePaths checks paths as an update's: at most MaxPaths JSON
// pointers, none empty (the whole document is no field) nor longer than
// MaxPathBytes.
func ParsePaths(paths []string) error {
	if len(paths) > MaxPaths {
		return fmt.Errorf("%w: %d paths, more than %d", ErrInvalid, len(paths), MaxPaths)
	}
	for _, p := range paths {
		if len(p) > MaxPathBytes {
			return fmt.Errorf("%w: a path of %d bytes, more than %d", ErrInvalid, len(p), MaxPathBytes)
		}
		if _, err := split(p); err != nil {
			return err
		}
	}
	return nil
}

// split parses a JSON pointer into its member names.
func split(p string) ([]string, error) {
	if p == "" || p[0] != '/' {
		return nil, fmt.Errorf("%w: path %q is not a JSON pointer to a member (it must start with '/')", ErrInvalid, p)
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		if !strings.Contains(s, "~") {
			continue
		}
		for j := 0; j < len(s); j++ {
			if s[j] == '~' && (j+1 == len(s) || s[j+1] != '0' && s[j+1] != '1') {
				return nil, fmt.Errorf("%w: path %q: '~' must be followed by '0' or '1'", ErrInvalid, p)
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

var escaper = strings.NewReplacer("~", "~0", "/", "~1")

// Pointer returns the JSON pointer of the member names tokens.
func Pointer(tokens ...string) string { return join(tokens) }

func join(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escaper.Replace(t))
	}
	return b.String()
}

// leafTokens appends the leaf paths of obj, under at, to out.
func leafTokens(obj map[string]any, at []string, out [][]string) [][]string {
	for k, v := range obj {
		p := append(slices.Clip(at), k)
		if o, ok := v.(map[string]any); ok && len(o) > 0 {
			out = leafTokens(o, p, out)
			continue
		}
		out = append(out, p)
	}
	return out
}

func lookup(obj map[string]any, t []string) (any, bool) {
	var v any = obj
	for _, k := range t {
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

// through reports whether t leads through a value of obj that is not an
// object (before its last member name). A missing member is no such
// value: the path removes what is there.
func through(obj map[string]any, t []string) bool {
	var v any = obj
	for _, k := range t[:len(t)-1] {
		o, ok := v.(map[string]any)
		if !ok {
			return true
		}
		if v, ok = o[k]; !ok {
			return false
		}
	}
	_, ok := v.(map[string]any)
	return !ok
}

// set returns obj with t set to v (ok) or removed (!ok), making the
// objects on the way.
func set(obj map[string]any, t []string, v any, ok bool) map[string]any {
	if obj == nil {
		obj = map[string]any{}
	}
	if len(t) == 1 {
		if ok {
			obj[t[0]] = v
		} else {
			delete(obj, t[0])
		}
		return obj
	}
	child, isObj := obj[t[0]].(map[string]any)
	if !isObj {
		if !ok {
			return obj // nothing there to remove
		}
		child = nil
	}
	obj[t[0]] = set(child, t[1:], v, ok)
	return obj
}

func equal(a, b any) bool { return reflect.DeepEqual(a, b) }

func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("not a JSON object")
	}
	// Only space may follow the object: dec.More would let a stray '}'
	// or ']' through.
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more after the JSON object")
	}
	return obj, nil
}

// encode writes v as compact JSON, members sorted, without escaping
// '<', '>' and '&'.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Quote returns path's tokens as a readable string for messages.
func Quote(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = strconv.Quote(p)
	}
	return strings.Join(q, ", ")
}
