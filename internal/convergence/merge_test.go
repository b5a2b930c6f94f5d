package convergence

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"
)

// TestMerge is field-level merge (the server's default conflict
// policy) with real processes: three `syncd run` daemons and `syncd
// server --conflicts '*=merge'`, on bbolt and on two PostgreSQL
// replicas. Each scenario takes devices offline (their proxies cut),
// makes the edits, and brings them back one at a time, so the order in
// which the server sees the writes, and so its versions, are known;
// where a daemon's pull could race its own refused write, the scenario
// picks the order (--pull off, or the proxy's hold). Then every device
// and the server must hold the record the rule says, and the server's
// history must list the versions it superseded.
func TestMerge(t *testing.T) {
	syncdBinary(t)
	t.Parallel()
	for _, st := range []struct {
		name     string
		postgres bool
	}{{"bbolt", false}, {"postgres", true}} {
		t.Run(st.name, func(t *testing.T) {
			if st.postgres && os.Getenv("SYNCD_TEST_POSTGRES_DSN") == "" {
				t.Skip("SYNCD_TEST_POSTGRES_DSN is not set")
			}
			t.Parallel()
			w := newMergeWorld(t, st.postgres)
			for _, sc := range []struct {
				name string
				f    func(*mergeWorld, string)
			}{
				{"disjoint-fields", (*mergeWorld).disjointFields},
				{"nested-fields", (*mergeWorld).nestedFields},
				{"same-field", (*mergeWorld).sameField},
				{"same-field-feed-first", (*mergeWorld).sameFieldPulledFirst},
				{"conflict-then-newer-version", (*mergeWorld).conflictThenNewer},
				{"same-id-created-twice", (*mergeWorld).createdTwice},
				{"delete-against-edit", (*mergeWorld).deleteAgainstEdit},
			} {
				// In sequence, on one cluster, each on its own record:
				// the scenarios cut and restore links of shared devices.
				t.Run(sc.name, func(t *testing.T) {
					w.t = t
					defer w.reset()
					sc.f(w, sc.name)
				})
			}
		})
	}
}

// mergeTimeout bounds each wait of a scenario: a device coming back
// online probes the server within DefaultProbeInterval (5 s), and a
// send that failed offline is retried at once when it answers.
const mergeTimeout = 30 * time.Second

// mergeWorld is one cluster for the merge scenarios: devices A and B
// edit, C stays online and watches.
type mergeWorld struct {
	t       *testing.T
	c       *cluster
	a, b, o *device
}

func newMergeWorld(t *testing.T, postgres bool) *mergeWorld {
	t.Helper()
	name := "merge-bbolt"
	if postgres {
		name = "merge-postgres"
	}
	cfg := config{name: name, postgres: postgres, policy: policyMerge}
	account := fmt.Sprintf("mg-%s-%08x", name, rand.Uint32()) // fresh: the PostgreSQL database is shared
	c := newCluster(t, cfg, 3, account)
	for _, d := range c.devices {
		d.owner = t // the scenarios, subtests, restart daemons
		d.start(t, account)
	}
	w := &mergeWorld{t: t, c: c, a: c.devices[0], b: c.devices[1], o: c.devices[2]}
	w.a.name, w.b.name, w.o.name = "A", "B", "C"
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs in %s (kept: the test failed)", c.dir)
		}
	})
	return w
}

// reset brings every link back and every daemon up with its usual
// flags after a scenario, whatever it left.
func (w *mergeWorld) reset() {
	for _, d := range w.c.devices {
		d.proxy.setHold(false, false)
		d.proxy.setCut(false)
		if !d.up() || d.args != nil {
			if d.up() {
				d.proc.stop()
			}
			d.args = nil
			d.start(w.t, w.c.account)
		}
	}
}

// obj parses a JSON object literal of the test.
func obj(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(fmt.Sprintf("obj %q: %v", s, err))
	}
	return m
}

// must sends one request to a device and fails the test unless it
// answers want.
func (w *mergeWorld) must(d *device, want int, method, path string, body any) map[string]any {
	w.t.Helper()
	b := ""
	if body != nil {
		b = jsonBody(body)
	}
	code, m, err := d.call(method, path, b)
	if err != nil || code != want {
		w.t.Fatalf("%s: %s %s %s: %d %s %v (want %d)", d.name, method, path, b, code, errText(m), err, want)
	}
	return m
}

// waitFor polls cond (other processes: there is nothing to wait on in
// this one) until it holds or mergeTimeout passes; cond says what it
// saw, for the failure.
func (w *mergeWorld) waitFor(what string, cond func() (bool, string)) {
	w.t.Helper()
	deadline := time.Now().Add(mergeTimeout)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("after %s, still not %s: %s", mergeTimeout, what, saw)
		}
		time.Sleep(50 * time.Millisecond) // polling another process
	}
}

// entity reads an entity from a device (code 404: not shown).
func entity(d *device, typ, id string) (int, map[string]any) {
	code, m, err := d.call("GET", "/v1/entities/"+typ+"/"+id, "")
	if err != nil {
		return 0, map[string]any{"error": map[string]any{"code": "read", "message": err.Error()}}
	}
	return code, m
}

// waitShows waits until d shows the entity synced with data want.
func (w *mergeWorld) waitShows(d *device, typ, id string, want map[string]any) map[string]any {
	w.t.Helper()
	var e map[string]any
	w.waitFor(fmt.Sprintf("%s showing %s/%s synced with %s", d.name, typ, id, canonical(want)), func() (bool, string) {
		code, m := entity(d, typ, id)
		e = m
		raw, _ := json.Marshal(m)
		return code == 200 && str(m, "syncState") == "synced" && canonical(m["data"]) == canonical(want), fmt.Sprintf("%d %s", code, raw)
	})
	return e
}

// waitOp waits until d's operation id is in state and returns it.
func (w *mergeWorld) waitOp(d *device, id, state string) map[string]any {
	w.t.Helper()
	var op map[string]any
	w.waitFor(fmt.Sprintf("%s's operation %s %s", d.name, id, state), func() (bool, string) {
		code, m, err := d.call("GET", "/v1/operations/"+id, "")
		op = m
		raw, _ := json.Marshal(m)
		return err == nil && code == 200 && str(m, "state") == state, fmt.Sprintf("%d %s %v", code, raw, err)
	})
	return op
}

// write makes one write on d and returns its operation id.
func (w *mergeWorld) write(d *device, method, path string, body any) string {
	w.t.Helper()
	want := 200
	if method == "POST" {
		want = 201
	}
	b := ""
	if body != nil {
		b = jsonBody(body)
	}
	code, m, err := d.call(method, path, b)
	if err != nil || code != want && code != 200 {
		w.t.Fatalf("%s: %s %s: %d %s %v", d.name, method, path, code, errText(m), err)
	}
	id := str(m, "operationId")
	if id == "" {
		id = str(m, "lastOperationId")
	}
	if id == "" {
		w.t.Fatalf("%s: %s %s: no operation id in %v", d.name, method, path, m)
	}
	return id
}

// create makes typ/id with data on d.
func (w *mergeWorld) create(d *device, typ, id string, data map[string]any) string {
	w.t.Helper()
	return w.write(d, "POST", "/v1/entities/"+typ, map[string]any{"id": id, "data": data})
}

// patch sends an RFC 7396 merge patch to typ/id on d.
func (w *mergeWorld) patch(d *device, typ, id string, patch map[string]any) string {
	w.t.Helper()
	return w.write(d, "PATCH", "/v1/entities/"+typ+"/"+id, map[string]any{"data": patch})
}

// serverRecord is the live record the server holds under typ/clientID,
// and how many live ones it holds under it (one, or the id is in two).
func (w *mergeWorld) serverRecords(typ, clientID string) []feedRecord {
	w.t.Helper()
	var out []feedRecord
	code, m, err := call("GET", w.c.liveReplica()+"/v1/"+typ, w.c.account+".checker", "")
	if err != nil || code != 200 {
		w.t.Fatalf("server: GET /v1/%s: %d %s %v", typ, code, errText(m), err)
	}
	raw, _ := json.Marshal(m["items"])
	var items []feedRecord
	if err := json.Unmarshal(raw, &items); err != nil {
		w.t.Fatal(err)
	}
	for _, it := range items {
		if it.ClientID == clientID && !it.Deleted {
			out = append(out, it)
		}
	}
	return out
}

// converged waits until the server holds one live record of typ/id with
// data want and every device shows it synced with that data and the
// record's server id; it returns the server's record.
func (w *mergeWorld) converged(typ, id string, want map[string]any) feedRecord {
	w.t.Helper()
	var rec feedRecord
	w.waitFor(fmt.Sprintf("the server holding %s/%s with %s", typ, id, canonical(want)), func() (bool, string) {
		recs := w.serverRecords(typ, id)
		raw, _ := json.Marshal(recs)
		if len(recs) != 1 || canonical(recs[0].Data) != canonical(want) {
			return false, string(raw)
		}
		rec = recs[0]
		return true, ""
	})
	for _, d := range w.c.devices {
		e := w.waitShows(d, typ, id, want)
		if str(e, "serverId") != rec.ID {
			w.t.Errorf("%s: %s/%s has serverId %q, the server's record is %s", d.name, typ, id, str(e, "serverId"), rec.ID)
		}
	}
	return rec
}

// nothingFailed checks that no device holds a failed operation of
// typ/id or shows it in conflict.
func (w *mergeWorld) nothingFailed(typ, id string) {
	w.t.Helper()
	for _, d := range w.c.devices {
		ops, err := listOps(d, "permanent_failed")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, o := range ops {
			if str(o, "entityType") == typ && str(o, "entityId") == id {
				raw, _ := json.Marshal(o)
				w.t.Errorf("%s: failed operation %s", d.name, raw)
			}
		}
		ents, err := listEntities(d, typ, "conflict")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, e := range ents {
			if str(e, "id") == id {
				raw, _ := json.Marshal(e)
				w.t.Errorf("%s: entity in conflict %s", d.name, raw)
			}
		}
	}
}

// version is one item of GET /v1/{type}/{id}/versions.
type version struct {
	Version int64           `json:"version"`
	Data    json.RawMessage `json:"data"`
	Deleted bool            `json:"deleted"`
}

func (v version) String() string {
	if v.Deleted {
		return fmt.Sprintf("v%d deleted", v.Version)
	}
	return fmt.Sprintf("v%d %s", v.Version, canonical(v.Data))
}

// history checks the server's versions of rec (GET {server}/v1/{type}/
// {serverId}/versions, the account's bearer token): exactly want,
// newest first, the first one the record as the feed holds it; and a
// device's GET /v1/entities/{type}/{id}/versions reads the same.
func (w *mergeWorld) history(typ, id string, rec feedRecord, want ...version) {
	w.t.Helper()
	code, m, err := call("GET", w.c.liveReplica()+"/v1/"+typ+"/"+url.PathEscape(rec.ID)+"/versions", w.c.account+".checker", "")
	if err != nil || code != 200 {
		w.t.Fatalf("server: GET /v1/%s/%s/versions: %d %s %v", typ, rec.ID, code, errText(m), err)
	}
	got := versionsOf(w.t, m)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		w.t.Errorf("server: versions of %s/%s (%s), newest first:\n  got  %v\n  want %v", typ, id, rec.ID, got, want)
	}
	if len(got) > 0 && (got[0].Version != rec.Version || canonical(got[0].Data) != canonical(rec.Data)) {
		w.t.Errorf("server: the newest version %v is not the record %d %s", got[0], rec.Version, canonical(rec.Data))
	}
	code, m, err = w.a.call("GET", "/v1/entities/"+typ+"/"+id+"/versions", "")
	if err != nil || code != 200 {
		w.t.Errorf("%s: GET /v1/entities/%s/%s/versions: %d %s %v", w.a.name, typ, id, code, errText(m), err)
	} else if local := versionsOf(w.t, m); fmt.Sprint(local) != fmt.Sprint(got) {
		w.t.Errorf("%s: versions of %s/%s through the local API: %v; the server's: %v", w.a.name, typ, id, local, got)
	}
}

func versionsOf(t *testing.T, m map[string]any) []version {
	t.Helper()
	raw, _ := json.Marshal(m["items"])
	var vs []version
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatalf("versions: %v: %s", err, raw)
	}
	return vs
}

func v(n int64, data string) version { return version{Version: n, Data: json.RawMessage(data)} }

// offlineEdits makes edit on A and on B with both cut off, then brings A
// back, waits for its operation to be done, and brings B back: the
// server sees A's write first. It returns the two operation ids.
func (w *mergeWorld) offlineEdits(editA, editB func() string) (opA, opB string) {
	w.t.Helper()
	w.a.proxy.setCut(true)
	w.b.proxy.setCut(true)
	opA, opB = editA(), editB()
	w.a.proxy.setCut(false)
	w.waitOp(w.a, opA, "done")
	w.b.proxy.setCut(false)
	return opA, opB
}

// seed creates typ/id with data on A and waits until every device shows
// it synced.
func (w *mergeWorld) seed(typ, id string, data map[string]any) {
	w.t.Helper()
	w.create(w.a, typ, id, data)
	for _, d := range w.c.devices {
		w.waitShows(d, typ, id, data)
	}
}

// (a) A sets /title and B sets /done, both offline: both apply.
func (w *mergeWorld) disjointFields(id string) {
	w.seed("note", id, obj(`{"title":"t0","done":false}`))
	_, opB := w.offlineEdits(
		func() string { return w.patch(w.a, "note", id, obj(`{"title":"A"}`)) },
		func() string { return w.patch(w.b, "note", id, obj(`{"done":true}`)) })
	w.waitOp(w.b, opB, "done")
	rec := w.converged("note", id, obj(`{"title":"A","done":true}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec,
		v(3, `{"done":true,"title":"A"}`), v(2, `{"done":false,"title":"A"}`), v(1, `{"done":false,"title":"t0"}`))
}

// (b) /address/city on A and /address/zip on B merge.
func (w *mergeWorld) nestedFields(id string) {
	w.seed("note", id, obj(`{"title":"t0","address":{"city":"c0","zip":"z0"}}`))
	_, opB := w.offlineEdits(
		func() string { return w.patch(w.a, "note", id, obj(`{"address":{"city":"Paris"}}`)) },
		func() string { return w.patch(w.b, "note", id, obj(`{"address":{"zip":"75001"}}`)) })
	w.waitOp(w.b, opB, "done")
	rec := w.converged("note", id, obj(`{"title":"t0","address":{"city":"Paris","zip":"75001"}}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec,
		v(3, `{"address":{"city":"Paris","zip":"75001"},"title":"t0"}`),
		v(2, `{"address":{"city":"Paris","zip":"z0"},"title":"t0"}`),
		v(1, `{"address":{"city":"c0","zip":"z0"},"title":"t0"}`))
}

// restart stops d (SIGTERM) and starts it again on its data directory
// with args added to its flags.
func (w *mergeWorld) restart(d *device, args ...string) {
	w.t.Helper()
	if err := d.proc.stop(); err != nil {
		w.t.Fatalf("%s: stop: %v", d.name, err)
	}
	d.args = args
	d.start(w.t, w.c.account)
}

// waitConflict waits until d shows typ/id in conflict and returns it.
func (w *mergeWorld) waitConflict(d *device, typ, id string) map[string]any {
	w.t.Helper()
	var e map[string]any
	w.waitFor(fmt.Sprintf("%s showing %s/%s in conflict", d.name, typ, id), func() (bool, string) {
		code, m := entity(d, typ, id)
		e = m
		raw, _ := json.Marshal(m)
		return code == 200 && str(m, "syncState") == "conflict", fmt.Sprintf("%d %s", code, raw)
	})
	return e
}

// checkConflictView checks that e, in conflict, reads conflict.paths
// as want (canonical JSON).
func (w *mergeWorld) checkConflictView(d *device, e map[string]any, want string) {
	w.t.Helper()
	raw, _ := json.Marshal(e["conflict"])
	if canonical(json.RawMessage(raw)) != canonical(json.RawMessage(want)) {
		all, _ := json.Marshal(e)
		w.t.Errorf("%s's conflict:\n  got  %s\n  want %s\n  entity %s", d.name, raw, want, all)
	}
}

// resolveByPaths resolves typ/id on d taking a side per field; when
// the daemon refuses that, the failure is reported and fallback (a whole
// resolve body) settles the entity instead, so the scenario can go on
// to convergence. It waits for the resolution's operation, if any.
func (w *mergeWorld) resolveByPaths(d *device, typ, id string, paths map[string]string, fallback map[string]any) {
	w.t.Helper()
	path := "/v1/entities/" + typ + "/" + id + "/resolve"
	code, ans, err := d.call("POST", path, jsonBody(map[string]any{"paths": paths}))
	if err != nil {
		w.t.Fatal(err)
	}
	if code != 200 {
		_, e := entity(d, typ, id)
		raw, _ := json.Marshal(e["conflict"])
		w.t.Errorf("%s: resolve %s/%s {\"paths\": %s}: %d %s, while the entity (deleted locally: %v) reads conflict %s; settling with %s instead",
			d.name, typ, id, jsonBody(paths), code, errText(ans), e["deleted"] == true, raw, jsonBody(fallback))
		ans = w.must(d, 200, "POST", path, fallback)
	}
	if oid := str(ans, "operationId"); oid != "" {
		w.waitOp(d, oid, "done")
	}
}

// (c) /title edited on A and on B (B also sets /done, A /n): B's update
// is refused with a conflict on /title alone, its base, local and
// server values shown; B takes its own title; all three devices end
// with A's /n, B's /done and B's /title. B runs with --pull off until
// it resolved, so the refusal reaches it before the feed brings A's
// version (the order sameFieldPulledFirst reverses).
func (w *mergeWorld) sameField(id string) {
	w.seed("note", id, obj(`{"title":"t0","done":false,"n":0}`))
	w.restart(w.b, "--pull", "off")
	_, opB := w.offlineEdits(
		func() string { return w.patch(w.a, "note", id, obj(`{"title":"A","n":1}`)) },
		func() string { return w.patch(w.b, "note", id, obj(`{"title":"B","done":true}`)) })
	w.waitShows(w.o, "note", id, obj(`{"title":"A","done":false,"n":1}`))
	if op := w.waitOp(w.b, opB, "permanent_failed"); str(op, "lastErrorCode") != "version_conflict" {
		w.t.Errorf("B's update failed with %q, want version_conflict", str(op, "lastErrorCode"))
	}
	e := w.waitConflict(w.b, "note", id)
	w.checkConflictView(w.b, e, `{"paths":[{"path":"/title","base":"t0","baseKnown":true,"local":"B","server":"A"}]}`)
	w.resolveByPaths(w.b, "note", id, map[string]string{"/title": "local"}, obj(`{"data":{"title":"B","done":true,"n":1}}`))
	w.restart(w.b)
	rec := w.converged("note", id, obj(`{"title":"B","done":true,"n":1}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec,
		v(3, `{"done":true,"n":1,"title":"B"}`), v(2, `{"done":false,"n":1,"title":"A"}`), v(1, `{"done":false,"n":0,"title":"t0"}`))
}

// (c, the feed first) As sameField, with B's pull on, in the other
// order: B's link is held (nothing lost, nothing through); B's update
// goes out into it; A's update lands; the feed's answer to B's long
// poll, carrying A's version, is let through first and B keeps that
// record beside its entity; only then does B's update reach the server
// and come back refused. The conflict must read the same.
func (w *mergeWorld) sameFieldPulledFirst(id string) {
	w.seed("note", id, obj(`{"title":"t0","done":false,"n":0}`))
	w.b.proxy.setHold(true, true)
	opB := w.patch(w.b, "note", id, obj(`{"title":"B","done":true}`))
	opA := w.patch(w.a, "note", id, obj(`{"title":"A","n":1}`))
	w.waitOp(w.a, opA, "done")
	w.waitShows(w.o, "note", id, obj(`{"title":"A","done":false,"n":1}`))
	w.waitFor("the feed's answer to B held", func() (bool, string) {
		n := w.b.proxy.heldDownBytes()
		return n > 0, fmt.Sprintf("%d bytes held", n)
	})
	w.b.proxy.setHold(true, false) // the feed's answer, not B's update
	var e map[string]any
	w.waitFor("B keeping A's version beside its entity", func() (bool, string) {
		_, e = entity(w.b, "note", id)
		srv, _ := e["server"].(map[string]any)
		raw, _ := json.Marshal(e)
		return srv["version"] == 2.0, string(raw)
	})
	// A's /n shows at once, B's own fields laid over the record.
	if want := obj(`{"title":"B","done":true,"n":1}`); canonical(e["data"]) != canonical(want) || str(e, "syncState") != "pending" {
		raw, _ := json.Marshal(e)
		w.t.Errorf("B, its update unsent, after the feed brought A's version: want data %s pending, got %s", canonical(want), raw)
	}
	w.b.proxy.setHold(false, false)
	if op := w.waitOp(w.b, opB, "permanent_failed"); str(op, "lastErrorCode") != "version_conflict" {
		w.t.Errorf("B's update failed with %q, want version_conflict", str(op, "lastErrorCode"))
	}
	e = w.waitConflict(w.b, "note", id)
	w.checkConflictView(w.b, e, `{"paths":[{"path":"/title","base":"t0","baseKnown":true,"local":"B","server":"A"}]}`)
	w.resolveByPaths(w.b, "note", id, map[string]string{"/title": "local"}, obj(`{"data":{"title":"B","done":true,"n":1}}`))
	rec := w.converged("note", id, obj(`{"title":"B","done":true,"n":1}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec,
		v(3, `{"done":true,"n":1,"title":"B"}`), v(2, `{"done":false,"n":1,"title":"A"}`), v(1, `{"done":false,"n":0,"title":"t0"}`))
}

// (c, then a newer version) B is in conflict on /title, as in
// sameField; then A edits another field, /n, and the feed brings that
// version to B while B's conflict waits. B shows A's /n at once and its
// conflict still reads field by field: /title alone, the server's value
// from the newest record; a side per field still resolves it.
func (w *mergeWorld) conflictThenNewer(id string) {
	w.seed("note", id, obj(`{"title":"t0","done":false,"n":0}`))
	w.restart(w.b, "--pull", "off")
	_, opB := w.offlineEdits(
		func() string { return w.patch(w.a, "note", id, obj(`{"title":"A"}`)) },
		func() string { return w.patch(w.b, "note", id, obj(`{"title":"B","done":true}`)) })
	w.waitOp(w.b, opB, "permanent_failed")
	e := w.waitConflict(w.b, "note", id)
	w.checkConflictView(w.b, e, `{"paths":[{"path":"/title","base":"t0","baseKnown":true,"local":"B","server":"A"}]}`)
	w.waitOp(w.a, w.patch(w.a, "note", id, obj(`{"n":5}`)), "done")
	w.restart(w.b) // the pull on again: it brings version 3
	w.waitFor("B keeping version 3 beside its entity", func() (bool, string) {
		_, e = entity(w.b, "note", id)
		srv, _ := e["server"].(map[string]any)
		raw, _ := json.Marshal(e)
		return srv["version"] == 3.0, string(raw)
	})
	if want := obj(`{"title":"B","done":true,"n":5}`); canonical(e["data"]) != canonical(want) || str(e, "syncState") != "conflict" {
		raw, _ := json.Marshal(e)
		w.t.Errorf("B after the feed brought A's /n: want data %s in conflict, got %s", canonical(want), raw)
	}
	w.checkConflictView(w.b, e, `{"paths":[{"path":"/title","base":"t0","baseKnown":true,"local":"B","server":"A"}]}`)
	w.resolveByPaths(w.b, "note", id, map[string]string{"/title": "local"}, obj(`{"data":{"title":"B","done":true,"n":5}}`))
	rec := w.converged("note", id, obj(`{"title":"B","done":true,"n":5}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec, v(4, `{"done":true,"n":5,"title":"B"}`), v(3, `{"done":false,"n":5,"title":"A"}`),
		v(2, `{"done":false,"n":0,"title":"A"}`), v(1, `{"done":false,"n":0,"title":"t0"}`))
}

// (d) The same id created on A ({title}) and on B ({done}) offline: one
// record on the server with both fields.
func (w *mergeWorld) createdTwice(id string) {
	_, opB := w.offlineEdits(
		func() string { return w.create(w.a, "note", id, obj(`{"title":"A"}`)) },
		func() string { return w.create(w.b, "note", id, obj(`{"done":true}`)) })
	w.waitOp(w.b, opB, "done")
	rec := w.converged("note", id, obj(`{"title":"A","done":true}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec, v(2, `{"done":true,"title":"A"}`), v(1, `{"title":"A"}`))
}

// (e) A deletes a record B edited since A's base: the delete is refused
// and A shows the entity in conflict, with the server's record holding
// B's edit. A runs with --pull off until it resolved, so the refusal
// reaches it before the feed brings B's version (with the fields changed
// since A's base, docs/server.md). A takes the server's record, by a
// side per field if the read shows the conflict field by field; every
// device ends with B's edit, and the record was never deleted.
func (w *mergeWorld) deleteAgainstEdit(id string) {
	w.seed("note", id, obj(`{"title":"t0","done":false}`))
	w.restart(w.a, "--pull", "off")
	w.b.proxy.setCut(true)
	w.a.proxy.setCut(true)
	opB := w.patch(w.b, "note", id, obj(`{"title":"B"}`))
	opA := w.write(w.a, "DELETE", "/v1/entities/note/"+id, nil)
	w.b.proxy.setCut(false)
	w.waitOp(w.b, opB, "done")
	w.waitShows(w.o, "note", id, obj(`{"title":"B","done":false}`))
	w.a.proxy.setCut(false)
	if op := w.waitOp(w.a, opA, "permanent_failed"); str(op, "lastErrorCode") != "version_conflict" {
		w.t.Errorf("A's delete failed with %q, want version_conflict", str(op, "lastErrorCode"))
	}
	e := w.waitConflict(w.a, "note", id)
	listed := false
	if ents, err := listEntities(w.a, "note", "conflict"); err == nil {
		for _, x := range ents {
			listed = listed || str(x, "id") == id
		}
	}
	if !listed {
		w.t.Errorf("A: ?syncState=conflict does not list note/%s", id)
	}
	if srv, _ := e["server"].(map[string]any); canonical(srv["data"]) != canonical(obj(`{"title":"B","done":false}`)) {
		raw, _ := json.Marshal(e)
		w.t.Errorf("A's conflict does not hold the server's record with B's edit: %s", raw)
	}
	// What the read offers, resolve must take: a conflict shown field
	// by field is resolved with a side per field (all "server" here).
	conflict, _ := e["conflict"].(map[string]any)
	if paths, _ := conflict["paths"].([]any); len(paths) > 0 {
		sides := map[string]string{}
		for _, p := range paths {
			sides[str(p.(map[string]any), "path")] = "server"
		}
		w.resolveByPaths(w.a, "note", id, sides, obj(`{"take":"server"}`))
	} else {
		w.must(w.a, 200, "POST", "/v1/entities/note/"+id+"/resolve", obj(`{"take":"server"}`))
	}
	w.restart(w.a)
	rec := w.converged("note", id, obj(`{"title":"B","done":false}`))
	w.nothingFailed("note", id)
	w.history("note", id, rec, v(2, `{"done":false,"title":"B"}`), v(1, `{"done":false,"title":"t0"}`))
}
