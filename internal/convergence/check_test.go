package convergence

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// quietOf says whether a device is quiet: signed in, not paused, its
// pull idle (up to date, long-polling), nothing sending or waiting to be
// retried, and (strict) nothing pending or failed; not strict, pending
// operations are allowed when a failed one holds them (behind it in
// their partition, or after it in an ordered group).
func quietOf(d *device, strict bool) (bool, string) {
	code, st, err := d.call("GET", "/v1/status", "")
	if err != nil || code != 200 {
		return false, fmt.Sprintf("status: %d %v", code, err)
	}
	pull, _ := st["pull"].(map[string]any)
	counts, _ := st["accountCounts"].(map[string]any)
	n := func(s string) int { f, _ := counts[s].(float64); return int(f) }
	why := fmt.Sprintf("pull %v %v, online %v, paused %v %v, counts %v", pull["state"], pull["lastError"], st["online"], st["paused"], st["pauseReason"], counts)
	if st["signedIn"] != true || st["paused"] == true || pull["state"] != "idle" || n("sending") > 0 || n("retry_waiting") > 0 {
		return false, why
	}
	if strict {
		return n("pending") == 0 && n("permanent_failed") == 0, why
	}
	if n("pending") == 0 {
		return true, why
	}
	held, free, err := heldOps(d)
	if err != nil {
		return false, err.Error()
	}
	if len(free) > 0 {
		return false, fmt.Sprintf("%s; %d pending not held (e.g. %s), %d held", why, len(free), free[0], held)
	}
	return true, why
}

// heldOps counts the pending operations a failed one holds, and lists
// those it does not.
func heldOps(d *device) (held int, free []string, err error) {
	pending, err := listOps(d, "pending")
	if err != nil {
		return 0, nil, err
	}
	failed, err := listOps(d, "permanent_failed")
	if err != nil {
		return 0, nil, err
	}
	all := append(append([]map[string]any{}, pending...), failed...)
	seq := func(o map[string]any) float64 { f, _ := o["seq"].(float64); return f }
	slices.SortFunc(all, func(a, b map[string]any) int { return int(seq(a) - seq(b)) })
	blocked := map[string]bool{} // operation ids: failed, or held
	blockedPart := map[string]bool{}
	for _, o := range all {
		part := str(o, "entityType") + "/" + str(o, "entityId")
		// "blocked": held by its ordered group, which waits until every
		// earlier member is done (the daemon says so: a member done
		// while the group was held is not in these lists).
		if str(o, "state") == "permanent_failed" || o["blocked"] == true || blockedPart[part] || blocked[str(o, "after")] {
			if str(o, "state") == "pending" {
				held++
			}
			blocked[str(o, "id")] = true
			blockedPart[part] = true
			continue
		}
		free = append(free, fmt.Sprintf("%s %s %s", str(o, "id"), str(o, "operationType"), part))
	}
	return held, free, nil
}

// waitQuiet waits until every device is quiet, up to the run's quiet
// timeout. It polls GET /v1/status: the daemons are other processes.
func (r *run) waitQuiet(strict bool) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(r.p.quietTimeout)
	report := start.Add(10 * time.Second)
	for {
		var why []string
		for _, d := range r.c.devices {
			if ok, w := quietOf(d, strict); !ok {
				why = append(why, d.name+": "+w)
			}
		}
		if len(why) == 0 {
			return time.Since(start), nil
		}
		if time.Now().After(report) { // a slow quiet: say what it waits for
			r.t.Logf("not quiet after %s: %s%s", time.Since(start).Round(time.Second), strings.Join(why, "; "), r.waiting())
			report = report.Add(10 * time.Second)
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("no quiet after %s: %s", r.p.quietTimeout, strings.Join(why, "; "))
		}
		time.Sleep(100 * time.Millisecond) // polling other processes' status
	}
}

// waiting lists the operations waiting for a retry, with the error
// and the time they wait for: why a quiet is slow.
func (r *run) waiting() string {
	var b strings.Builder
	for _, d := range r.c.devices {
		ops, err := listOps(d, "retry_waiting")
		if err != nil {
			continue
		}
		for _, o := range ops {
			next, _ := time.Parse(time.RFC3339Nano, str(o, "nextAttemptAt"))
			fmt.Fprintf(&b, "\n  %s %s %s %s/%s: attempt %v, %s, next in %s", d.name, str(o, "id"), str(o, "operationType"),
				str(o, "entityType"), str(o, "entityId"), o["attemptCount"], str(o, "lastErrorCode"), time.Until(next).Round(time.Millisecond))
		}
	}
	return b.String()
}

// intentReport is what became of the operation ids the writes got.
type intentReport struct {
	done, failedVisible, held, purgedByChecker, purgedWithEvent int
	violations                                                  []string
	unverified                                                  []string
}

// checkIntents looks up every operation id a write answered: done,
// visibly failed (permanent_failed with a code, its entity in conflict
// or failed), held behind such a one, purged by the checker's own
// resolve or discard, or purged with an operation.purged event (a
// delete of an entity whose write the server refused drops its queued
// writes). Anything else is an intent that vanished.
func (r *run) checkIntents() intentReport {
	var rep intentReport
	purged := map[int]map[string]bool{}
	for _, d := range r.c.devices {
		_, st, err := d.call("GET", "/v1/status", "")
		if err != nil {
			rep.unverified = append(rep.unverified, d.name+": status: "+err.Error())
			continue
		}
		last, _ := st["lastEventSeq"].(float64)
		evs, resync, err := readEvents(d.url, d.token, uint64(last))
		if err != nil {
			rep.unverified = append(rep.unverified, d.name+": "+err.Error())
		}
		if resync {
			rep.unverified = append(rep.unverified, d.name+": the event log no longer holds its oldest events (resync)")
		}
		purged[d.idx] = map[string]bool{}
		for _, e := range evs {
			if e.Type == "operation.purged" {
				purged[d.idx][e.OperationID] = true
			}
		}
	}
	heldBy := map[int]map[string]bool{}
	for _, d := range r.c.devices {
		heldBy[d.idx] = map[string]bool{}
		pending, _ := listOps(d, "pending")
		for _, o := range pending {
			heldBy[d.idx][str(o, "id")] = true
		}
	}
	for _, in := range r.intents {
		d := r.c.devices[in.dev]
		desc := fmt.Sprintf("%s op %s (%s at step %d)", d.name, in.opID, in.what, in.step)
		if in.opID == "" {
			rep.violations = append(rep.violations, desc+": the write's answer had no operationId")
			continue
		}
		code, op, err := d.call("GET", "/v1/operations/"+in.opID, "")
		if err != nil {
			rep.unverified = append(rep.unverified, desc+": "+err.Error())
			continue
		}
		switch {
		case code == 404 && r.byChecker[in.opID]:
			rep.purgedByChecker++
		case code == 404 && purged[in.dev][in.opID]:
			rep.purgedWithEvent++
		case code == 404:
			rep.violations = append(rep.violations, desc+": vanished (no operation, no operation.purged event, not purged by the checker)")
		case code != 200:
			rep.unverified = append(rep.unverified, fmt.Sprintf("%s: GET operation: %d %s", desc, code, errCode(op)))
		case str(op, "state") == "done":
			rep.done++
		case str(op, "state") == "pending" && heldBy[in.dev][in.opID]:
			rep.held++
		case str(op, "state") == "permanent_failed":
			typ, id := str(op, "entityType"), str(op, "entityId")
			ecode, ent, _ := d.call("GET", "/v1/entities/"+typ+"/"+id, "")
			ss := str(ent, "syncState")
			switch {
			case str(op, "lastErrorCode") == "":
				rep.violations = append(rep.violations, desc+": permanent_failed without a code")
			case ecode == 200 && (ss == "conflict" || ss == "failed"):
				rep.failedVisible++
			case ecode == 404 && r.listedInConflict(d, typ, id):
				rep.failedVisible++
			default:
				rep.violations = append(rep.violations, fmt.Sprintf("%s: permanent_failed %s, but its entity is not visible as failed or in conflict (GET: %d %s, syncState %q; not in ?syncState=conflict)",
					desc, str(op, "lastErrorCode"), ecode, errCode(ent), ss))
			}
		default:
			rep.violations = append(rep.violations, fmt.Sprintf("%s: still %s after quiet", desc, str(op, "state")))
		}
	}
	return rep
}

// listedInConflict reports whether ?syncState=conflict lists the entity.
func (r *run) listedInConflict(d *device, typ, id string) bool {
	ents, err := listEntities(d, typ, "conflict")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if str(e, "id") == id {
			return true
		}
	}
	return false
}

// maxSettleRounds bounds settleAll. Under reject a round can bring new
// conflicts: a take of the local data made on a version another device's
// resolution has just passed, and the members of an ordered group, held
// until then, each meeting a newer version when it finally goes, one
// member a round. A soak's long groups took more than 8.
const maxSettleRounds = 64

// settleAll resolves every conflict and discards every failed operation
// the devices show, taking server or local at random, until none is
// left or rounds run out. It waits for quiet between rounds.
func (r *run) settleAll() error {
	for round := 1; round <= maxSettleRounds; round++ {
		acted := 0
		for _, d := range r.c.devices {
			failed, err := listOps(d, "permanent_failed")
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			for _, op := range failed {
				k := str(op, "entityType") + "/" + str(op, "entityId")
				if seen[k] {
					continue // one settle per entity and round
				}
				seen[k] = true
				res, dis := r.settle(d, op, []string{"server", "local"}[r.rng.IntN(2)], r.pick())
				r.st.finalResolves += res
				r.st.finalDiscards += dis
				acted++
			}
			for _, typ := range entityTypes {
				ents, err := listEntities(d, typ, "conflict")
				if err != nil {
					r.t.Logf("%s: %v", d.name, err)
					continue
				}
				for _, e := range ents {
					if seen[typ+"/"+str(e, "id")] {
						continue
					}
					take := []string{"server", "local"}[r.rng.IntN(2)]
					body, how := r.resolution(e, take, r.pick())
					code, m, err := d.call("POST", "/v1/entities/"+typ+"/"+str(e, "id")+"/resolve", body)
					if err == nil && code == 200 {
						r.st.finalResolves++
						r.noteResolve(d, how, typ, str(e, "id"), m)
					} else if err == nil {
						r.notePathsRefused(how, code)
						r.t.Logf("%s: resolve %s/%s %s (deleted locally %v): %d %s", d.name, typ, str(e, "id"), how, e["deleted"] == true, code, errText(m))
					}
					acted++
				}
			}
		}
		r.st.resolveRound = round
		if acted == 0 {
			return nil
		}
		if _, err := r.waitQuiet(false); err != nil {
			return err
		}
	}
	return fmt.Errorf("conflicts or failed operations still there after %d rounds of resolving", maxSettleRounds)
}

// pick draws the choice of a resolution under the merge policy
// (resolution); under the others it draws nothing, so their seeds keep
// the sequence of draws they had before merge setups existed.
func (r *run) pick() int {
	if r.cfg.policy != policyMerge {
		return 0
	}
	return r.rng.IntN(1 << 20)
}

// difference is one way a device differs from the server.
type difference struct {
	device, key, kind string
	local, server     string
}

func (d difference) String() string {
	return fmt.Sprintf("%s %s: %s\n    local:  %s\n    server: %s", d.device, d.key, d.kind, d.local, d.server)
}

// diff compares every device with the server's feed: the live records
// at their latest version.
func (r *run) diff() ([]difference, error) {
	recs, err := r.c.feed()
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Deleted {
			r.tombstones[rec.ID] = true
		}
	}
	var diffs []difference
	recJSON := func(rec feedRecord, ok bool) string {
		if !ok {
			return "(none)"
		}
		b, _ := json.Marshal(rec)
		return string(b)
	}
	for _, d := range r.c.devices {
		seen := map[string]bool{}
		for _, typ := range entityTypes {
			ents, err := listEntities(d, typ, "")
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			for _, e := range ents {
				k := typ + "/" + str(e, "id")
				seen[k] = true
				rec, ok := recs[k]
				local, _ := json.Marshal(e)
				add := func(kind string) {
					diffs = append(diffs, difference{d.name, k, kind, string(local), recJSON(rec, ok)})
				}
				switch {
				case !ok || rec.Deleted:
					add("on the device, not live on the server")
				case canonical(e["data"]) != canonical(rec.Data):
					add(fmt.Sprintf("data differs (device %s)", e["syncState"]))
				case str(e, "serverId") != rec.ID:
					add("serverId differs")
				case str(e, "syncState") != "synced":
					add("not synced after quiet: " + str(e, "syncState"))
				}
			}
		}
		for k, rec := range recs {
			if !rec.Deleted && !seen[k] {
				diffs = append(diffs, difference{d.name, k, "live on the server, missing on the device", "(none)", recJSON(rec, true)})
			}
		}
	}
	slices.SortFunc(diffs, func(a, b difference) int { return strings.Compare(a.device+a.key, b.device+b.key) })
	return diffs, nil
}

// waitConverged diffs until no difference is left or the quiet timeout
// passes (a pulled change may still be on its way when quiet is seen).
func (r *run) waitConverged() ([]difference, error) {
	deadline := time.Now().Add(r.p.quietTimeout)
	for {
		diffs, err := r.diff()
		if err == nil && len(diffs) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return diffs, err
		}
		time.Sleep(200 * time.Millisecond) // polling other processes
	}
}
