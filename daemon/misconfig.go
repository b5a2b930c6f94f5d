package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// A setup mistake makes every operation fail the same way: a base URL
// that redirects, a route the server does not have (404 on every
// create), a TLS certificate the daemon does not trust. Failing each
// operation in turn buries the one cause under a list of failures. So
// when MisconfigThreshold different partition heads in a row fail the
// same way, the daemon pauses sending to the remote with one status,
// remote_misconfigured (Status.RemoteProblem: what was seen, how to fix
// it), and holds the operations instead of failing them. It checks
// again with one operation MisconfigRecheck later, doubling up to
// misconfigRecheckMax, and at once after a new session; any other
// answer ends the pause. A restart (with the configuration fixed) starts
// without it.

// MisconfigThreshold is how many different partition heads must fail
// the same way in a row (no other answer between them) before sending
// pauses as remote_misconfigured. Below it, an operation that fails so
// is held once (retried after its backoff) instead of failed, so that a
// queue of only a few operations does not fail them one by one before
// the pattern shows; a second such failure of the same operation with
// no pause is its own.
const MisconfigThreshold = 3

// MisconfigRecheck is how long after pausing as remote_misconfigured the
// daemon tries one operation again; the wait doubles after each check
// that fails the same way, up to misconfigRecheckMax.
const MisconfigRecheck = time.Minute

const misconfigRecheckMax = 10 * time.Minute

// PauseRemoteMisconfigured is the Status.PauseReason while sending is
// paused for a setup mistake (Status.RemoteProblem says which).
const PauseRemoteMisconfigured = "remote_misconfigured"

// Event types of the remote's configuration.
const (
	// EventRemoteMisconfigured: sending paused as remote_misconfigured;
	// Data is {"kind","seen","fix"}.
	EventRemoteMisconfigured = "remote.misconfigured"
	// EventRemoteRestored: the remote answered otherwise; sending goes on.
	EventRemoteRestored = "remote.restored"
)

// Kinds of RemoteProblem.
const (
	MisconfigRedirect = "redirect"        // the remote answers requests with a redirect (3xx)
	MisconfigRoute    = "route_not_found" // creates are answered 404 or 405: no such route
	MisconfigTLS      = "tls"             // the TLS handshake fails (transport.CodeTLS)
)

// RemoteProblem is why sending is paused as remote_misconfigured.
type RemoteProblem struct {
	// Code is always "remote_misconfigured".
	Code string `json:"code"`
	// Kind is MisconfigRedirect, MisconfigRoute or MisconfigTLS.
	Kind string `json:"kind"`
	// Seen is what the daemon saw, the latest instance: the request and
	// the answer or error.
	Seen string `json:"seen"`
	// Fix says how to fix it.
	Fix string `json:"fix"`
	// Since is when sending paused; NextCheckAt when one operation is
	// tried again.
	Since       time.Time `json:"since"`
	NextCheckAt time.Time `json:"nextCheckAt"`
}

// misconfig is the daemon's watch for a misconfigured remote.
type misconfig struct {
	mu      sync.Mutex
	kind    string          // the run: the kind the last answers shared
	heads   map[string]bool // the partitions of the run
	problem *RemoteProblem  // nil unless paused
	wait    time.Duration   // the current recheck wait
	trial   bool            // a recheck send is in flight
}

// misconfigKind says whether outcome o of op looks like a setup mistake
// every operation would hit, and which.
func misconfigKind(op queue.Operation, o transport.Outcome) (string, bool) {
	switch {
	case o.Code == transport.CodeTLS:
		return MisconfigTLS, true
	case o.Status >= 300 && o.Status < 400:
		return MisconfigRedirect, true
	case (o.Status == http.StatusNotFound || o.Status == http.StatusMethodNotAllowed) && op.Type == queue.OpCreate:
		return MisconfigRoute, true
	}
	return "", false
}

// misconfigHeldCodes are the codes held operations wait with: a restore
// brings them forward.
var misconfigHeldCodes = []string{transport.CodeTLS, transport.CodeUnexpectedStatus, transport.CodeNotFound, transport.CodeRejected}

// describe says what was seen and how to fix it.
func describe(kind string, o transport.Outcome) (seen, fix string) {
	req := o.Method + " " + o.URL
	switch kind {
	case MisconfigRedirect:
		seen = fmt.Sprintf("%s was answered %d %s", req, o.Status, http.StatusText(o.Status))
		if o.Location != "" {
			seen += ", Location: " + o.Location
		}
		fix = "syncd does not follow redirects (a redirected write can lose its body or its Idempotency-Key). Set the remote URL (--remote, remote in the config) to the address the server redirects to, then restart syncd."
	case MisconfigRoute:
		seen = fmt.Sprintf("%s was answered %d %s for %d different entities in a row", req, o.Status, http.StatusText(o.Status), MisconfigThreshold)
		fix = "The server has no such route. Check the remote URL (--remote: the server's base URL, without the /v1 of the routes) and the routes configured for the entity type (routes in the config), then restart syncd."
	case MisconfigTLS:
		seen = fmt.Sprintf("%s failed: %s", req, message(o))
		fix = "The TLS handshake with the server fails: its certificate is not trusted or does not name the host, or the URL says https for a plain-HTTP server. Fix the server's certificate, or the scheme and host of the remote URL (--remote), then restart syncd."
	}
	return seen, fix
}

// remoteGate is asked before a claim: while paused as misconfigured,
// only one operation at a time may go, once the recheck is due (trial).
// A claim that gets a trial and takes nothing must call endTrial.
func (d *Daemon) remoteGate() (ok, trial bool) {
	m := &d.mis
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.problem == nil {
		return true, false
	}
	if m.trial || d.now().Before(m.problem.NextCheckAt) {
		return false, false
	}
	m.trial = true
	return true, true
}

// endTrial frees the recheck slot (the trial's outcome was recorded, or
// nothing was sent) and wakes the workers.
func (d *Daemon) endTrial() {
	d.mis.mu.Lock()
	d.mis.trial = false
	d.mis.mu.Unlock()
	d.wake()
}

// misconfigWake returns when sending may go on while paused (the
// recheck), ok false when not paused, and wait true while a recheck is
// in flight (its end wakes the workers).
func (d *Daemon) misconfigWake() (at time.Time, paused, wait bool) {
	m := &d.mis
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.problem == nil {
		return time.Time{}, false, false
	}
	return m.problem.NextCheckAt, true, m.trial
}

// remoteProblem returns a copy of the current problem, or nil.
func (d *Daemon) remoteProblem() *RemoteProblem {
	d.mis.mu.Lock()
	defer d.mis.mu.Unlock()
	if d.mis.problem == nil {
		return nil
	}
	p := *d.mis.problem
	return &p
}

// recheckRemote makes the recheck due now (a new session: the user may
// have fixed something).
func (d *Daemon) recheckRemote() {
	d.mis.mu.Lock()
	paused := d.mis.problem != nil
	if paused {
		d.mis.problem.NextCheckAt = d.now()
	}
	d.mis.mu.Unlock()
	if paused {
		d.bringHeldForward()
	}
}

// checkRemote looks at an outcome for a misconfigured remote. held says
// the operation is held until at, instead of the outcome's own decision:
// while paused, or once below the threshold.
func (d *Daemon) checkRemote(c claimed, o transport.Outcome) (at time.Time, held bool) {
	kind, bad := misconfigKind(c.op, o)
	if !bad && o.Status == 0 {
		return at, false // no answer: says nothing about the configuration
	}
	now := d.now()
	m := &d.mis
	m.mu.Lock()
	if !bad {
		m.kind, m.heads = "", nil
		restored := m.problem
		m.problem = nil
		m.mu.Unlock()
		if restored != nil {
			d.restored(c.op, restored)
		}
		return at, false
	}
	if p := m.problem; p != nil {
		seen, _ := describe(kind, o)
		if p.Kind == kind {
			p.Seen = seen
		}
		if c.trial {
			m.wait = min(2*m.wait, misconfigRecheckMax)
			p.NextCheckAt = now.Add(m.wait)
			d.logger.Info("daemon: the remote still looks misconfigured", "kind", kind, "seen", seen, "nextCheck", m.wait)
		}
		at = p.NextCheckAt
		m.mu.Unlock()
		return at, true
	}
	if m.kind != kind {
		m.kind, m.heads = kind, map[string]bool{}
	}
	m.heads[c.op.PartitionKey()] = true
	if len(m.heads) >= MisconfigThreshold {
		seen, fix := describe(kind, o)
		m.wait = MisconfigRecheck
		m.problem = &RemoteProblem{Code: PauseRemoteMisconfigured, Kind: kind, Seen: seen, Fix: fix, Since: now, NextCheckAt: now.Add(m.wait)}
		m.kind, m.heads = "", nil
		p := *m.problem
		m.mu.Unlock()
		d.misconfigured(c.op, p)
		return p.NextCheckAt, true
	}
	m.mu.Unlock()
	if o.Decision == transport.Retry || c.op.LastErrorCode == o.Code {
		// Retried anyway; or held once already and the pattern did not
		// show: the failure is this operation's own.
		return at, false
	}
	return now.Add(d.policy.Delay(transport.Outcome{Decision: transport.Retry}, c.op.AttemptCount-1, d.rnd)), true
}

// misconfigured logs and records the pause.
func (d *Daemon) misconfigured(op queue.Operation, p RemoteProblem) {
	d.logger.Warn("daemon: the remote looks misconfigured; sending is paused", "kind", p.Kind, "seen", p.Seen, "fix", p.Fix, "nextCheck", p.NextCheckAt.Sub(p.Since))
	data, _ := json.Marshal(map[string]string{"kind": p.Kind, "seen": p.Seen, "fix": p.Fix})
	if _, err := d.store.AppendEvent(context.Background(), queue.Event{Type: EventRemoteMisconfigured, AccountID: op.AccountID, Data: data}); err != nil {
		d.logger.Error("daemon: append event", "type", EventRemoteMisconfigured, "err", err)
	}
}

// restored logs the end of the pause and sends what was held.
func (d *Daemon) restored(op queue.Operation, p *RemoteProblem) {
	d.logger.Info("daemon: the remote answers otherwise now; sending goes on", "kind", p.Kind, "pausedFor", d.now().Sub(p.Since))
	data, _ := json.Marshal(map[string]string{"kind": p.Kind})
	if _, err := d.store.AppendEvent(context.Background(), queue.Event{Type: EventRemoteRestored, AccountID: op.AccountID, Data: data}); err != nil {
		d.logger.Error("daemon: append event", "type", EventRemoteRestored, "err", err)
	}
	d.bringHeldForward()
}

// bringHeldForward makes the operations held for the misconfigured
// remote ready now, and wakes the workers.
func (d *Daemon) bringHeldForward() {
	if sess, ok := d.snapshot(); ok {
		if _, err := d.store.RetryNow(context.Background(), sess.account, misconfigHeldCodes...); err != nil {
			d.logger.Error("daemon: bring held operations forward", "err", err)
		}
	}
	d.wake()
}
