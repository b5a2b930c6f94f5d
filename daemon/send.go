package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Codes the daemon records on operations, beside transport's codes.
const (
	// CodeOperationExpired: an attempt of the operation may have been
	// applied (queue.Operation.MaybeApplied) and it is older than
	// Config.MaxOperationAge, counted from the latest of its creation
	// and the user's retry or renewal; the server may have forgotten its
	// key, so it is not resent blindly. The user reviews it.
	CodeOperationExpired = "operation_expired"
	// CodeLocalError: the operation's request could not be built from
	// the local data (reading its entity row failed); nothing was sent.
	// It waits and is tried again (retry_waiting), backing off from 1s.
	CodeLocalError = "local_error"
	// CodeRetryExpired: retrying an operation that may have been applied
	// would go past the policy's MaxElapsed (transport.CodeRetryExpired).
	CodeRetryExpired = transport.CodeRetryExpired
)

// Event types the daemon appends to the change log.
const (
	// EventSessionRefreshNeeded: the server refused the session's token
	// (401); sending is paused until PUT /v1/session gives a new one.
	EventSessionRefreshNeeded = "session.refresh_needed"
	// EventConnectivityChanged: the remote became reachable or not; Data
	// is {"online":bool}.
	EventConnectivityChanged = "connectivity.changed"
)

// process sends one claimed operation and records the outcome. hard ends
// the send when the daemon stops. With chain set, a done outcome also
// claims the worker's next operation in the same commit; process returns
// it (ok true) for the worker to go on with.
func (d *Daemon) process(hard context.Context, c claimed, chain bool) (next claimed, ok bool) {
	op := c.op
	if d.hooks.afterClaim != nil {
		d.hooks.afterClaim(op)
	}
	// The account guard: the operation's account is the session's, and
	// the session (and so the token) is still the one it was claimed
	// under. Otherwise nothing is sent.
	if op.AccountID != c.sess.account || !d.current(c.sess) {
		d.leaveChain(hard, c)
		d.releaseUnsent(c, "session changed")
		return next, false
	}
	// The age guard: an attempt that may have been applied is not
	// resent once the server may have forgotten its key. One that cannot
	// have been is sent whatever its age.
	if age := d.now().Sub(ageStart(op)); op.MaybeApplied && age > d.maxAge {
		msg := fmt.Sprintf("the operation is %s old (counted from its creation or the user's latest retry) and an attempt of it may have reached the server without an answer; the server may have forgotten its key by now, so it is not resent: review it, then retry or discard it", age.Round(time.Second))
		d.leaveChain(hard, c)
		d.fail(c, CodeOperationExpired, msg, false, false) // nothing was sent
		return next, false
	}
	req, err := d.request(op, c.sess.token)
	if err != nil {
		d.leaveChain(hard, c)
		d.unbuildable(c, err)
		return next, false
	}

	// The send ends when the daemon stops, when the account's session
	// ends, and before the lease could be taken over.
	ctx, cancel := context.WithTimeout(hard, d.lease*2/3)
	unhook := context.AfterFunc(c.sess.ctx, cancel)
	// The session may have ended while the request was built; AfterFunc
	// cancels asynchronously, so look once more before anything is sent.
	if c.sess.ctx.Err() != nil || !d.current(c.sess) {
		unhook()
		cancel()
		d.leaveChain(hard, c)
		d.releaseUnsent(c, "session changed")
		return next, false
	}
	d.inSend.Add(1)
	began := d.now()
	o := d.sendOne(ctx, op.ID, req)
	d.metrics.attemptSeconds.Observe(d.now().Sub(began).Seconds())
	d.inSend.Add(-1)
	leaseCut := errors.Is(ctx.Err(), context.DeadlineExceeded) && hard.Err() == nil && c.sess.ctx.Err() == nil
	unhook()
	cancel()

	if d.hooks.afterResponse != nil {
		d.hooks.afterResponse(op, o)
	}
	d.contact(o)
	return d.record(c, o, leaseCut, chain)
}

// request builds the transport request of op, resolving the server id of
// an update or delete from the entity row at send time: the create that
// went before it put it there.
func (d *Daemon) request(op queue.Operation, token string) (transport.Request, error) {
	r := transport.Request{
		OperationID:    op.Key(),
		Op:             string(op.Type),
		EntityType:     op.EntityType,
		EntityID:       op.EntityID,
		Data:           json.RawMessage(op.Payload),
		PayloadVersion: op.PayloadVersion,
		Paths:          op.Paths,
		Token:          token,
	}
	if op.Type != queue.OpCreate {
		entityRow := d.store.EntityRow
		if d.hooks.entityRow != nil {
			entityRow = d.hooks.entityRow
		}
		e, err := entityRow(op.AccountID, op.EntityType, op.EntityID)
		switch {
		case errors.Is(err, queue.ErrEntityNotFound):
			// Nothing to address: the transport answers missing_server_id.
		case err != nil:
			return r, err
		default:
			r.ServerID = e.ServerID
			// The version the change was made on: this device's own
			// earlier writes and the pulls applied to the entity moved it.
			r.BaseVersion = e.ServerVersion
			r.BaseNone = e.Unbased
		}
	}
	return r, nil
}

// unbuildable backs off an operation whose request could not be built
// (reading its entity row failed): it waits in retry_waiting, from 1s
// doubling per attempt up to the policy's backoff cap, on the daemon's
// clock. Released at once, it would be claimed again at once: a spin of
// two commits a turn for as long as the read fails. Nothing was sent,
// so it is not maybe applied, and the wait does not give up: the age
// never fails an operation that never left.
func (d *Daemon) unbuildable(c claimed, err error) {
	op := c.op
	wait := d.policy.Backoff.Cap(op.AttemptCount - 1)
	d.logger.Error("daemon: the operation's request cannot be built; trying again later", "operation", op.ID, "in", wait, "err", err)
	msg := "the request could not be built from the local data: " + err.Error()
	id, owner, at := op.ID, c.owner, d.now().Add(wait)
	write := func(ctx context.Context) error {
		return d.store.RetryAt(ctx, id, owner, at, CodeLocalError, msg, false)
	}
	if err := write(context.Background()); err != nil {
		d.storeErr("retry (request not built)", op, err, write)
	}
}

// record stores the decision of an outcome in the queue. With chain
// set, a done operation's completion also claims the next ready
// operation of the same session, unless the daemon is stopping or the
// session changed.
func (d *Daemon) record(c claimed, o transport.Outcome, leaseCut, chain bool) (next claimed, ok bool) {
	op := c.op
	if at, held := d.checkRemote(c, o); held {
		// The remote looks misconfigured: the operation waits for it to
		// be fixed instead of failing.
		d.metrics.attempt(o.Code)
		msg := "held: the remote looks misconfigured (see syncd status): " + message(o)
		id, owner, code, mayBe := op.ID, c.owner, o.Code, maybeApplied(o)
		write := func(ctx context.Context) error {
			return d.store.RetryAt(ctx, id, owner, at, code, msg, mayBe)
		}
		if err := write(context.Background()); err != nil {
			d.storeErr("hold", op, err, write)
		}
		return next, false
	}
	ctx := context.Background() // the outcome must land even while stopping
	if d.inSend.Load() > 0 {
		// Other sends are in flight, and under load their outcomes
		// arrive within milliseconds: let this one wait for them (at most
		// the queue's DeferWait, 2ms) and share their commit. Fewer
		// fsyncs on the disk the app's writes use too; an outcome lost to
		// a crash meanwhile is only sent again and answered from the
		// server's idempotency record.
		ctx = queue.Deferrable(ctx)
	}
	switch o.Decision {
	case transport.Done:
		d.metrics.attempt(doneResult(o))
		comp := queue.Completion{ServerID: o.ServerID, OtherData: o.OtherData, ServerPayloadVersion: o.ServerPayloadVersion,
			ServerVersion: o.ServerVersion, Data: o.Data}
		if o.OtherData {
			d.logger.Warn("daemon: the server already held other data under the create's id; the entity's data follows as an update unless it is deleted", "operation", op.ID, "entityType", op.EntityType, "entityId", op.EntityID, "serverId", o.ServerID)
		}
		id, owner := op.ID, c.owner
		complete := func(ctx context.Context) error {
			_, err := d.store.Complete(ctx, id, owner, comp)
			return err
		}
		if !chain || d.stopping() || !d.current(c.sess) {
			if err := complete(ctx); err != nil {
				d.storeErr("complete", op, err, complete)
			}
			return next, false
		}
		nextOwner := d.newOwner()
		_, nop, got, err := d.store.CompleteAndClaim(ctx, op.ID, c.owner, comp, c.sess.account, nextOwner, d.lease)
		if err != nil {
			// Kept, it is recorded alone: the next claim is the
			// worker's to make.
			d.storeErr("complete", op, err, complete)
			return next, false
		}
		if got {
			return claimed{op: nop, owner: nextOwner, sess: c.sess}, true
		}
	case transport.RefreshSession:
		d.metrics.attempt(o.Code)
		// Pause first, so no other worker re-claims the released op and
		// sends it again with the refused token.
		paused := d.refreshNeeded(c.sess)
		if o.Sends == 0 && o.Status == 0 {
			// Not sent (no token, or one that cannot be sent): the
			// attempt is not counted.
			d.releaseUnsent(c, "token unsendable")
		} else {
			d.release(c, "token refused", maybeApplied(o))
		}
		if paused {
			why := "the server refused the session's token"
			if o.Code != transport.CodeUnauthorized {
				why = "the session's token cannot be sent (" + o.Code + ")"
			}
			d.logger.Warn("daemon: "+why+"; sending is paused until a new token is set", "account", op.AccountID)
			data, _ := json.Marshal(map[string]string{"reason": o.Code})
			if _, err := d.store.AppendEvent(ctx, queue.Event{Type: EventSessionRefreshNeeded, AccountID: op.AccountID, Data: data}); err != nil {
				d.logger.Error("daemon: append event", "type", EventSessionRefreshNeeded, "err", err)
			}
		}
	case transport.Retry:
		if o.Code == transport.CodeCanceled && !leaseCut {
			// The daemon is stopping or the session ended: no penalty.
			d.metrics.attempt(o.Code)
			d.release(c, "send canceled", maybeApplied(o))
			return
		}
		code := o.Code
		if leaseCut {
			code = transport.CodeTimeout
			o.Code = code
		}
		d.metrics.attempt(code)
		var at time.Time
		if op.MaybeApplied || maybeApplied(o) {
			// The server may hold it: give up before it may have
			// forgotten the key. The time counts from the latest of
			// creation and the user's retry or renewal.
			var giveUp bool
			var gcode string
			at, giveUp, gcode = d.policy.Next(o, op.AttemptCount-1, ageStart(op), d.now(), d.rnd)
			if giveUp {
				d.fail(c, gcode, fmt.Sprintf("gave up retrying after %d attempts; last error: %s", op.AttemptCount, message(o)), false, maybeApplied(o))
				return
			}
		} else {
			// Nothing of it can have reached the server: it is never
			// failed for its age (a laptop offline for weeks sends
			// everything when it is back).
			at = d.now().Add(d.policy.Delay(o, op.AttemptCount-1, d.rnd))
		}
		id, owner, msg, mayBe := op.ID, c.owner, message(o), maybeApplied(o)
		write := func(ctx context.Context) error {
			return d.store.RetryAt(ctx, id, owner, at, code, msg, mayBe)
		}
		if err := write(ctx); err != nil {
			d.storeErr("retry", op, err, write)
			return
		}
		d.logger.Debug("daemon: retry scheduled", "operation", op.ID, "code", code, "attempts", op.AttemptCount, "in", at.Sub(d.now()))
	case transport.Conflict:
		// Another device's write came first and the server refused this
		// one (its answer, fresh or replayed, is the key's only
		// execution): the entity turns conflict, with the server's record
		// beside the local data, for the app to resolve.
		d.metrics.attempt(o.Code)
		var cur queue.ServerState
		if o.Current != nil {
			cur = queue.ServerState{ID: o.Current.ID, Version: o.Current.Version, Deleted: o.Current.Deleted, Data: o.Current.Data,
				Paths: o.Current.Paths, Base: o.Current.Base}
		}
		d.logger.Info("daemon: the server holds a newer version written elsewhere; the entity is in conflict", "operation", op.ID,
			"entityType", op.EntityType, "entityId", op.EntityID, "code", o.Code, "serverVersion", cur.Version)
		id, owner, code, msg := op.ID, c.owner, o.Code, message(o)
		write := func(ctx context.Context) error {
			return d.store.Conflict(ctx, id, owner, code, msg, cur)
		}
		if err := write(ctx); err != nil {
			d.storeErr("conflict", op, err, write)
		}
	default: // Permanent, NeedsUserAction
		d.metrics.attempt(o.Code)
		// Declined when the server said it did not apply it: a fresh
		// refusal with no attempt under the key that may have been
		// applied, or a replayed one (the stored answer of the key's
		// only execution).
		isDeclined := declined[o.Code] && (o.Replayed || !op.MaybeApplied && !maybeApplied(o))
		d.fail(c, o.Code, message(o), isDeclined, maybeApplied(o))
	}
	return next, false
}

// ageStart is when an operation's age counts from, for the age guard
// and for giving up retries: its creation, or the user's latest retry or
// renewal (an update of a declined operation's entity), both of which
// set UserRetriedAt, whichever is later.
func ageStart(op queue.Operation) time.Time {
	if op.UserRetriedAt.After(op.CreatedAt) {
		return op.UserRetriedAt
	}
	return op.CreatedAt
}

// maybeApplied reports whether the server may have applied the attempt
// o without its outcome saying so (Operation.MaybeApplied):
//   - net/http sent it more than once (a kept-alive connection died
//     before an answer, and it resent the request on a new one): the
//     first may have been applied whatever the last answer;
//   - no answer after the request went out (a network error, a timeout,
//     a send cut off);
//   - a 2xx or 3xx not taken as done (no server id, a reply too large, a
//     redirect);
//   - a 5xx other than 503, or 409 in flight.
//
// A 408, 429 or 503 says the request was not processed; another 4xx is
// a refusal.
func maybeApplied(o transport.Outcome) bool {
	switch {
	case o.Sends > 1:
		return true
	case o.Status == 0:
		return o.Sends > 0
	case o.Status < 400:
		return true
	case o.Status == 409:
		return o.Code == transport.CodeInFlight
	}
	return o.Status >= 500 && o.Status != 503
}

// declined holds the outcome codes of a server's answer that it did not
// apply the operation: a 4xx about the request itself. Such an operation
// is recorded Declined (unless an attempt under its key may have been
// applied: see record), and the user's retry or the entity's next update
// sends the current data under a new key. Codes that leave the effect
// unknown (invalid_response, unexpected_status), or that mean the key
// already names other data (payload_conflict), are not here: such an
// operation keeps its key.
var declined = map[string]bool{
	transport.CodeValidation: true, // 400, 422
	transport.CodeRejected:   true, // other 4xx: 405, 413, 415, a domain 409
	transport.CodeForbidden:  true, // 403
	transport.CodeNotFound:   true, // 404 on create or update
	transport.CodeGone:       true, // 410 on create or update
}

func doneResult(o transport.Outcome) string {
	if o.Replayed {
		return "replayed"
	}
	return "done"
}

// message is the readable reason of an outcome for last_error and the
// entity's syncError.
func message(o transport.Outcome) string {
	switch {
	case o.Message != "":
		return o.Message
	case o.Err != nil:
		return o.Err.Error()
	}
	return o.Code
}

// fail records a permanent failure; isDeclined records it as declined
// (queue.Store.Decline), otherwise maybeApplied says whether this attempt
// may have been applied.
func (d *Daemon) fail(c claimed, code, msg string, isDeclined, maybeApplied bool) {
	op := c.op
	d.metrics.permanent(code)
	id, owner, typ, entityType := op.ID, c.owner, op.Type, op.EntityType
	write := func(ctx context.Context) error {
		var err error
		if isDeclined {
			err = d.store.Decline(ctx, id, owner, code, msg)
		} else {
			err = d.store.Fail(ctx, id, owner, code, msg, maybeApplied)
		}
		if err == nil {
			d.logger.Warn("daemon: operation failed permanently", "operation", id, "type", typ, "entityType", entityType, "code", code, "reason", msg)
		}
		return err
	}
	if err := write(context.Background()); err != nil {
		d.storeErr("fail", op, err, write)
	}
}

// release puts a claimed operation back to pending, ready at once.
// maybeApplied: its request went out and the send was cut off.
func (d *Daemon) release(c claimed, why string, maybeApplied bool) {
	id, owner := c.op.ID, c.owner
	write := func(ctx context.Context) error { return d.store.Release(ctx, id, owner, maybeApplied) }
	if err := write(context.Background()); err != nil {
		d.storeErr("release ("+why+")", c.op, err, write)
	}
}

// releaseUnsent releases a claim whose request was not sent: its attempt
// is not counted.
func (d *Daemon) releaseUnsent(c claimed, why string) {
	id, owner := c.op.ID, c.owner
	write := func(ctx context.Context) error { return d.store.ReleaseUnsent(ctx, id, owner) }
	if err := write(context.Background()); err != nil {
		d.storeErr("release ("+why+")", c.op, err, write)
	}
}

// storeErr handles a failed outcome write; write makes it again. A full
// disk (queue.ErrStorageFull) keeps the outcome in memory and writes it
// again when space returns (see keptOutcomes in storefail.go); the
// goroutine that keeps the first of a run waits for that here. Other
// failures are logged.
func (d *Daemon) storeErr(what string, op queue.Operation, err error, write func(context.Context) error) {
	if errors.Is(err, queue.ErrStorageFull) {
		if d.storeFail.keep(what, op.ID, err, write) {
			d.flushKept()
		}
		return
	}
	d.logNotRecorded(what, op.ID, err)
}

// logNotRecorded logs an outcome write that failed. A lost lease
// (another worker took the operation over) and a purged operation are
// expected and quiet.
func (d *Daemon) logNotRecorded(what, id string, err error) {
	if errors.Is(err, queue.ErrLeaseLost) || errors.Is(err, queue.ErrOperationNotFound) || errors.Is(err, queue.ErrIllegalTransition) {
		d.logger.Debug("daemon: outcome not recorded", "what", what, "operation", id, "err", err)
		return
	}
	d.logger.Error("daemon: outcome not recorded", "what", what, "operation", id, "err", err)
}

// reconnectMinOutage is how long the remote must have been unreachable
// before its first success sends at once what waited (retryNow). A
// shorter blip leaves backoffs of seconds, which need no help; and an
// operation that fails by itself while others get answers never makes an
// outage this long, so it keeps its own backoff.
const reconnectMinOutage = 30 * time.Second

// contact tracks whether the remote answers, and after an outage sends
// what waited.
func (d *Daemon) contact(o transport.Outcome) {
	switch {
	case o.Status != 0:
		// Only a success says the remote is well again (a 503 or 429
		// says "later").
		d.observe(true, o.Decision == transport.Done, false)
	case o.Code == transport.CodeNetwork || o.Code == transport.CodeTimeout:
		d.observe(false, false, false)
	default:
		// not sent, or canceled: says nothing about the remote
	}
}

// observe records what a send or a probe (byProbe) learned of the remote:
// whether it answered at all (online) and whether the answer was a
// success (well). A success after an outage sends what waited
// (retryNow) when the outage was real: it lasted reconnectMinOutage, or
// a probe failed during it (the network, not one operation, was down).
// The first success since start counts as the end of an outage of
// unknown length: the queue may hold backoffs from a run that was
// offline.
func (d *Daemon) observe(online, well, byProbe bool) {
	now := d.now()
	d.onlineMu.Lock()
	changed := !d.contacted || d.online != online
	d.online, d.contacted = online, true
	if online {
		d.answers++
	} else {
		if d.offlineSince.IsZero() {
			d.offlineSince = now
		}
		d.probeFailed = d.probeFailed || byProbe
	}
	flush := false
	if well {
		long := !d.offlineSince.IsZero() && now.Sub(d.offlineSince) >= reconnectMinOutage
		flush = !d.succeeded || long || d.probeFailed
		d.succeeded, d.offlineSince, d.probeFailed = true, time.Time{}, false
	}
	d.onlineMu.Unlock()
	if changed {
		d.logger.Info("daemon: remote reachability changed", "online", online)
		data, _ := json.Marshal(map[string]bool{"online": online})
		if _, err := d.store.AppendEvent(context.Background(), queue.Event{Type: EventConnectivityChanged, Data: data}); err != nil {
			d.logger.Error("daemon: append event", "type", EventConnectivityChanged, "err", err)
		}
		if !online {
			d.probeNow()
		} else {
			d.kickPull() // the remote is back: read what changed meanwhile
			d.wake()     // and the workers send what they held (offlineHold)
		}
	}
	if flush {
		d.retryNow()
	}
}

// retryNow sends at once what backed off while the remote was
// unreachable: operations of the session's account waiting after a
// network error or a timeout (an outage often shows as dial timeouts)
// need not wait out the rest of their backoff (up to DefaultBackoffMax,
// jittered). Waits after an answer (rate_limited, unavailable,
// server_error, with or without Retry-After) keep their time: the server
// was reachable and asked for patience.
func (d *Daemon) retryNow() {
	sess, ok := d.snapshot()
	if !ok {
		return
	}
	n, err := d.store.RetryNow(context.Background(), sess.account, transport.CodeNetwork, transport.CodeTimeout)
	if err != nil {
		d.logger.Error("daemon: bring waiting operations forward", "err", err)
		return
	}
	if n > 0 {
		d.logger.Info("daemon: the remote answers again; sending what waited", "operations", n)
		d.wake()
	}
}
