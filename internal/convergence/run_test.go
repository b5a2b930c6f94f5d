package convergence

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// tombstoneRetention is the servers' --tombstone-retention: short, so
// that every server start (the sweep runs at start, then every 10
// minutes) sweeps the tombstones of all but the last moment.
const tombstoneRetention = 1500 * time.Millisecond

// The id space: few ids of two types, so devices collide on them.
var entityTypes = []string{"note", "task"}

const idsPerType = 12

// config is one server setup and conflict policy.
type config struct {
	name     string
	postgres bool   // two replicas on one PostgreSQL database; else one on bbolt
	policy   string // the servers' conflict policy for every type: lww, reject or merge
}

// The conflict policies of `syncd server --conflicts` (remote.Policy).
const (
	policyLWW    = "lww"
	policyReject = "reject"
	policyMerge  = "merge"
)

// params sizes a run.
type params struct {
	devices      int
	steps        int           // write actions
	pace         time.Duration // each step pauses up to this (the workload's rhythm)
	daemonKills  int           // SIGKILLs per device
	offlines     int           // offline periods per device
	serverKills  int           // SIGKILLs per replica
	serverStops  int           // graceful restarts of a replica (each start sweeps)
	quietTimeout time.Duration // wait for quiet, and for the diff to clear
}

// intent is an operation id a write answered, with what it was.
type intent struct {
	dev   int
	opID  string
	what  string
	step  int
	batch bool
}

// stats are a run's figures.
type stats struct {
	writes, refused, batches, orderedBatches   int
	refusedCodes                               map[string]int
	daemonKills, serverKills, serverStops      int
	offline                                    int
	serverStarts                               int
	midResolves, midDiscards                   int
	finalResolves, finalDiscards, resolveRound int
	tombstonesSeen, tombstonesSwept            int
	resolvedHow                                map[string]int // resolves by kind: take, paths, data
	// pathsRefused counts resolves by paths that the daemon refused
	// although the entity read conflict.paths (a delete's conflict: the
	// read shows the fields, resolve takes only a whole side).
	pathsRefused int
}

// run is one seeded run of one config.
type run struct {
	t    *testing.T
	cfg  config
	p    params
	seed uint64
	rng  *rand.Rand
	c    *cluster

	intents []intent
	// byChecker are operation ids a resolve or discard the checker made
	// may have purged.
	byChecker  map[string]bool
	tombstones map[string]bool // server ids ever seen deleted in the feed
	st         stats

	// plan: step -> actions
	plan map[int][]action
	// late is the device that joins mid-run (a new device signing in
	// after tombstones were swept).
	late, lateAt int
}

type actionKind int

const (
	actKillDaemon actionKind = iota
	actRestartDaemon
	actCut
	actRestore
	actKillServer
	actStopServer
	actStartServer
)

type action struct {
	kind actionKind
	who  int
}

func newRun(t *testing.T, cfg config, p params, seed uint64) *run {
	r := &run{t: t, cfg: cfg, p: p, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		byChecker: map[string]bool{}, tombstones: map[string]bool{}, plan: map[int][]action{}}
	r.st.refusedCodes = map[string]int{}
	r.st.resolvedHow = map[string]int{}
	account := fmt.Sprintf("cv-%s-%d-%08x", cfg.name, seed, rand.Uint32()) // fresh per run: the PostgreSQL database is shared
	r.c = newCluster(t, cfg, p.devices, account)
	r.makePlan()
	return r
}

// makePlan draws when each device is killed and cut off, and when each
// replica is killed or restarted, from the seed.
func (r *run) makePlan() {
	at := func(lo, hi int) int { return lo + r.rng.IntN(max(hi-lo, 1)) }
	add := func(step int, a action) { r.plan[step] = append(r.plan[step], a) }
	r.late, r.lateAt = r.p.devices-1, r.p.steps/3
	for d := range r.p.devices {
		first := 1
		if d == r.late {
			first = r.lateAt + 1
		}
		for range r.p.daemonKills {
			s := at(first, r.p.steps)
			add(s, action{actKillDaemon, d})
			add(s+r.rng.IntN(15), action{actRestartDaemon, d})
		}
		for range r.p.offlines {
			s := at(first, r.p.steps)
			add(s, action{actCut, d})
			add(s+20+r.rng.IntN(120), action{actRestore, d})
		}
	}
	for i := range len(r.c.replicas) {
		for range r.p.serverKills {
			s := at(1, r.p.steps)
			add(s, action{actKillServer, i})
			add(s+5+r.rng.IntN(40), action{actStartServer, i})
		}
		for range r.p.serverStops {
			s := at(1, r.p.steps)
			add(s, action{actStopServer, i})
			add(s+1+r.rng.IntN(5), action{actStartServer, i})
		}
	}
}

// do carries out the planned actions of a step.
func (r *run) do(step int) {
	for _, a := range r.plan[step] {
		switch a.kind {
		case actKillDaemon:
			d := r.c.devices[a.who]
			if d.up() {
				d.proc.kill()
				r.st.daemonKills++
			}
		case actRestartDaemon:
			if d := r.c.devices[a.who]; !d.up() && d.started {
				d.start(r.t, r.c.account)
			}
		case actCut:
			d := r.c.devices[a.who]
			d.proxy.setCut(true)
			r.st.offline++
		case actRestore:
			r.c.devices[a.who].proxy.setCut(false)
		case actKillServer, actStopServer:
			rep := r.c.replicas[a.who]
			if !rep.up() {
				continue
			}
			r.noteTombstones()
			if a.kind == actKillServer {
				rep.proc.kill()
				r.st.serverKills++
			} else {
				if err := rep.proc.stop(); err != nil {
					r.t.Errorf("server%d: %v", rep.idx, err)
				}
				r.st.serverStops++
			}
		case actStartServer:
			if rep := r.c.replicas[a.who]; !rep.up() {
				r.c.restartReplica(rep)
				r.st.serverStarts++
			}
		}
	}
}

// noteTombstones reads the feed and remembers the tombstones in it, to
// count later which the sweeps removed.
func (r *run) noteTombstones() {
	recs, err := r.c.feed()
	if err != nil {
		return // counted at the next read
	}
	for _, rec := range recs {
		if rec.Deleted {
			r.tombstones[rec.ID] = true
		}
	}
}

// drive runs the workload: planned kills, cuts and restarts between
// seeded random writes.
func (r *run) drive() {
	for _, d := range r.c.devices {
		if d.idx != r.late {
			d.start(r.t, r.c.account)
		}
	}
	for step := range r.p.steps {
		if step == r.lateAt {
			r.c.devices[r.late].start(r.t, r.c.account)
		}
		r.do(step)
		r.step(step)
		if r.t.Failed() {
			return
		}
		time.Sleep(time.Duration(r.rng.Int64N(int64(r.p.pace)))) // the workload's rhythm, not a wait for a condition
	}
}

// pickDevice draws a device and returns it, or the next one that runs.
func (r *run) pickDevice() *device {
	n := len(r.c.devices)
	i := r.rng.IntN(n)
	for k := range n {
		if d := r.c.devices[(i+k)%n]; d.up() {
			return d
		}
	}
	return nil
}

// step is one app action on a random running device.
func (r *run) step(step int) {
	// Every draw is made whatever the answers, so the seed gives the
	// same sequence of draws.
	kind := r.rng.Float64()
	d := r.pickDevice()
	typ, id := r.pickEntity()
	upd := r.rng.Float64()
	val := r.rng.IntN(1000)
	bn := 2 + r.rng.IntN(4)
	take := []string{"server", "local"}[r.rng.IntN(2)]
	pick := r.rng.IntN(1 << 20)
	if d == nil {
		return
	}
	switch {
	case kind < 0.10:
		r.batch(d, step, bn, false)
	case kind < 0.16:
		r.batch(d, step, bn, true)
	case kind < 0.19:
		r.midResolve(d, take, pick)
	default:
		exists, ok := r.exists(d, typ, id)
		if !ok {
			return
		}
		r.single(d, step, typ, id, exists, upd, val)
	}
}

func (r *run) pickEntity() (string, string) {
	return entityTypes[r.rng.IntN(len(entityTypes))], fmt.Sprintf("e%02d", r.rng.IntN(idsPerType))
}

// exists reports whether the device shows the entity (ok false: the
// read failed).
func (r *run) exists(d *device, typ, id string) (exists, ok bool) {
	code, _, err := d.call("GET", "/v1/entities/"+typ+"/"+id, "")
	if err != nil {
		r.deviceError(d, "read", err)
		return false, false
	}
	return code == 200, true
}

func (r *run) deviceError(d *device, what string, err error) {
	if !d.up() {
		r.t.Errorf("%s died by itself (%s: %v); log %s:\n%s", d.name, what, err, d.log, tail(d.log, 40))
		return
	}
	r.t.Errorf("%s: %s: %v", d.name, what, err)
}

// data is a create's data.
func (r *run) data(d *device, step, val int) map[string]any {
	if r.cfg.policy == policyMerge {
		return mergeData(d, step, val)
	}
	return map[string]any{"dev": d.name, "step": step, "v": val}
}

// patch is an update's RFC 7396 merge patch; extra says whether it may
// also add or remove the member "extra".
func (r *run) patch(d *device, step, val int, extra bool) map[string]any {
	if r.cfg.policy == policyMerge {
		p := mergeData(d, step, val)
		if extra && (val/35)%4 == 1 {
			p["extra"] = nil
		}
		return p
	}
	p := r.data(d, step, val)
	if extra && val%3 == 0 {
		p["extra"] = val
	} else if extra && val%3 == 1 {
		p["extra"] = nil
	}
	return p
}

// mergeFields are the fields the merge setups write, two of them in a
// nested object: two devices' concurrent edits are often of other
// fields (both apply) and sometimes of the same one (a conflict on that
// field, or none when both set the same value).
var mergeFields = [][]string{{"title"}, {"done"}, {"n"}, {"address", "city"}, {"address", "zip"}}

// mergeValue is what a write sets field f of mergeFields to: the title
// and the address name the write, so that two writes of them never
// agree; done is a boolean, which two devices often set alike.
func mergeValue(f int, d *device, step, val int) any {
	switch f {
	case 1:
		return val%2 == 0
	case 2:
		return val
	}
	return fmt.Sprintf("%s.%d", d.name, step)
}

// mergeData is one or two of mergeFields chosen by val, and sometimes
// the member "extra": a create's data, or an update's merge patch.
func mergeData(d *device, step, val int) map[string]any {
	m := map[string]any{}
	set := func(f int) {
		path, at := mergeFields[f], m
		for _, k := range path[:len(path)-1] {
			next, ok := at[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				at[k] = next
			}
			at = next
		}
		at[path[len(path)-1]] = mergeValue(f, d, step, val)
	}
	set(val % len(mergeFields))
	if f := (val / 5) % 7; f < len(mergeFields) {
		set(f)
	}
	if (val/35)%4 == 0 {
		m["extra"] = val
	}
	return m
}

// single is one create, update or delete.
func (r *run) single(d *device, step int, typ, id string, exists bool, upd float64, val int) {
	var (
		method, path, body, what string
	)
	switch {
	case !exists:
		method, path, what = "POST", "/v1/entities/"+typ, "create"
		body = jsonBody(map[string]any{"id": id, "data": r.data(d, step, val)})
	case upd < 0.7:
		method, path, what = "PATCH", "/v1/entities/"+typ+"/"+id, "update"
		body = jsonBody(map[string]any{"data": r.patch(d, step, val, true)})
	default:
		method, path, what = "DELETE", "/v1/entities/"+typ+"/"+id, "delete"
	}
	code, m, err := d.call(method, path, body)
	if err != nil {
		r.deviceError(d, what, err)
		return
	}
	r.st.writes++
	if code/100 != 2 {
		r.st.refused++
		r.st.refusedCodes[fmt.Sprintf("%s %d %s", what, code, errCode(m))]++
		return
	}
	r.intents = append(r.intents, intent{dev: d.idx, opID: str(m, "operationId"), what: fmt.Sprintf("%s %s/%s", what, typ, id), step: step})
}

// batch is one POST /v1/batch of n writes made on what the device shows.
func (r *run) batch(d *device, step, n int, ordered bool) {
	local := map[string]bool{}
	for _, typ := range entityTypes {
		ents, err := listEntities(d, typ, "")
		if err != nil {
			r.deviceError(d, "list", err)
			return
		}
		for _, e := range ents {
			local[typ+"/"+str(e, "id")] = true
		}
	}
	var writes []map[string]any
	var whats []string
	for range n {
		typ, id := r.pickEntity()
		k := typ + "/" + id
		w := map[string]any{"type": typ, "id": id}
		u := r.rng.Float64()
		val := r.rng.IntN(1000)
		switch {
		case !local[k]:
			w["op"], w["data"] = "create", r.data(d, step, val)
			local[k] = true
		case u < 0.7:
			w["op"], w["data"] = "update", r.patch(d, step, val, false)
		default:
			w["op"] = "delete"
			local[k] = false
		}
		writes = append(writes, w)
		whats = append(whats, fmt.Sprintf("%s %s", w["op"], k))
	}
	code, m, err := d.call("POST", "/v1/batch", jsonBody(map[string]any{"writes": writes, "ordered": ordered}))
	if err != nil {
		r.deviceError(d, "batch", err)
		return
	}
	r.st.writes += n
	if ordered {
		r.st.orderedBatches++
	} else {
		r.st.batches++
	}
	if code != 200 {
		r.st.refused += n
		r.st.refusedCodes[fmt.Sprintf("batch %d %s", code, errCode(m))]++
		return
	}
	results, _ := m["results"].([]any)
	for i, res := range results {
		e, _ := res.(map[string]any)
		r.intents = append(r.intents, intent{dev: d.idx, opID: str(e, "operationId"), what: whats[i], step: step, batch: true})
	}
}

// listEntities reads every entity of a type the device shows (syncState
// filters, "" for all).
func listEntities(d *device, typ, syncState string) ([]map[string]any, error) {
	var all []map[string]any
	after := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if after != "" {
			q.Set("after", after)
		}
		if syncState != "" {
			q.Set("syncState", syncState)
		}
		code, m, err := d.call("GET", "/v1/entities/"+typ+"?"+q.Encode(), "")
		if err != nil {
			return nil, err
		}
		if code != 200 {
			return nil, fmt.Errorf("GET /v1/entities/%s?%s: %d %s", typ, q.Encode(), code, errCode(m))
		}
		for _, it := range m["items"].([]any) {
			all = append(all, it.(map[string]any))
		}
		if after = str(m, "next"); after == "" {
			return all, nil
		}
	}
}

// listOps reads the device's operations in a state.
func listOps(d *device, state string) ([]map[string]any, error) {
	var all []map[string]any
	after := ""
	for {
		q := url.Values{"limit": {"1000"}, "state": {state}}
		if after != "" {
			q.Set("after", after)
		}
		code, m, err := d.call("GET", "/v1/operations?"+q.Encode(), "")
		if err != nil {
			return nil, err
		}
		if code != 200 {
			return nil, fmt.Errorf("GET /v1/operations?%s: %d %s", q.Encode(), code, errCode(m))
		}
		for _, it := range m["items"].([]any) {
			all = append(all, it.(map[string]any))
		}
		if after = str(m, "next"); after == "" {
			return all, nil
		}
	}
}

// midResolve is an app settling one of its failed operations while the
// run goes on.
func (r *run) midResolve(d *device, take string, pick int) {
	failed, err := listOps(d, "permanent_failed")
	if err != nil {
		r.deviceError(d, "list failed", err)
		return
	}
	if len(failed) == 0 {
		return
	}
	resolved, discarded := r.settle(d, failed[pick%len(failed)], take, pick>>8)
	r.st.midResolves += resolved
	r.st.midDiscards += discarded
}

// conflictCodes are the codes of a permanently failed operation whose
// entity is in conflict.
var conflictCodes = []string{"version_conflict", "deleted_on_server"}

// settle resolves the entity of a failed operation (take) if it is in
// conflict, else discards the operation. The operations of the entity
// that were unfinished are recorded as the checker's own purges.
func (r *run) settle(d *device, op map[string]any, take string, pick int) (resolved, discarded int) {
	typ, id, opID := str(op, "entityType"), str(op, "entityId"), str(op, "id")
	for _, state := range []string{"pending", "permanent_failed"} {
		ops, err := listOps(d, state)
		if err != nil {
			r.deviceError(d, "list", err)
			return
		}
		for _, o := range ops {
			if str(o, "entityType") == typ && str(o, "entityId") == id {
				r.byChecker[str(o, "id")] = true
			}
		}
	}
	_, ent, _ := d.call("GET", "/v1/entities/"+typ+"/"+id, "")
	if str(ent, "syncState") == "conflict" || slices.Contains(conflictCodes, str(op, "lastErrorCode")) {
		body, how := r.resolution(ent, take, pick)
		code, m, err := d.call("POST", "/v1/entities/"+typ+"/"+id+"/resolve", body)
		if err != nil {
			r.deviceError(d, "resolve", err)
			return
		}
		if code == 200 {
			r.noteResolve(d, how, typ, id, m)
			return 1, 0
		}
		r.notePathsRefused(how, code)
		r.t.Logf("%s: resolve %s/%s %s (op %s, %s; deleted locally %v): %d %s; discarding the operation instead", d.name, typ, id, how, opID, str(op, "lastErrorCode"), ent["deleted"] == true, code, errText(m))
		if os.Getenv("SYNCD_CONVERGENCE_DEBUG") != "" {
			_, now, _ := d.call("GET", "/v1/entities/"+typ+"/"+id, "")
			_, o, _ := d.call("GET", "/v1/operations/"+opID, "")
			r.t.Logf("  entity %v\n  operation %v", now, o)
		}
	}
	code, m, err := d.call("POST", "/v1/operations/"+opID+"/discard", "")
	if err != nil {
		r.deviceError(d, "discard", err)
		return
	}
	if code != 200 {
		r.t.Logf("%s: discard %s: %d %s", d.name, opID, code, errText(m))
		return
	}
	return 0, 1
}

// resolution is the body of a resolve of the entity ent (as GET shows
// it) and what it does, for the log: take server or local; under the
// merge policy, pick also chooses a side per field in conflict
// ({"paths": ...}) when the server named the fields, or the app's own
// merged data ({"data": ...}: the server's record, or the local data
// when the server holds none, marked "merged").
func (r *run) resolution(ent map[string]any, take string, pick int) (body, how string) {
	if r.cfg.policy != policyMerge || pick%3 == 0 {
		return jsonBody(map[string]string{"take": take}), "take " + take
	}
	if pick%3 == 1 {
		conflict, _ := ent["conflict"].(map[string]any)
		paths, _ := conflict["paths"].([]any)
		if len(paths) > 0 {
			sides := map[string]string{}
			for i, p := range paths {
				sides[str(p.(map[string]any), "path")] = []string{"local", "server"}[(pick>>(2+i%16))&1]
			}
			return jsonBody(map[string]any{"paths": sides}), "paths " + jsonBody(sides)
		}
	}
	srv, _ := ent["server"].(map[string]any)
	data, _ := srv["data"].(map[string]any)
	if data == nil {
		data, _ = ent["data"].(map[string]any)
	}
	if data == nil {
		return jsonBody(map[string]string{"take": take}), "take " + take
	}
	merged := map[string]any{"merged": pick}
	for k, v := range data {
		if k != "merged" {
			merged[k] = v
		}
	}
	return jsonBody(map[string]any{"data": merged}), "data"
}

// notePathsRefused counts a resolve by paths answered 400.
func (r *run) notePathsRefused(how string, code int) {
	if strings.HasPrefix(how, "paths ") && code == 400 {
		r.st.pathsRefused++
	}
}

// noteResolve records the operation a resolve answered, if any, as an
// intent.
func (r *run) noteResolve(d *device, how, typ, id string, answer map[string]any) {
	kind, _, _ := strings.Cut(how, " ")
	r.st.resolvedHow[kind]++
	if oid := str(answer, "operationId"); oid != "" {
		r.intents = append(r.intents, intent{dev: d.idx, opID: oid, what: "resolve " + how + " " + typ + "/" + id})
	}
}

// restoreAll brings every process and link back.
func (r *run) restoreAll() {
	for _, rep := range r.c.replicas {
		if !rep.up() {
			r.c.restartReplica(rep)
			r.st.serverStarts++
		}
	}
	for _, d := range r.c.devices {
		d.proxy.setCut(false)
		if !d.up() {
			d.start(r.t, r.c.account)
		}
	}
}

func (s stats) refusedSummary() string { return countSummary(s.refusedCodes) }

// countSummary is counts as "key×n, ...", sorted.
func countSummary(counts map[string]int) string {
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
