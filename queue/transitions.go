package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// The outcomes a worker records for an operation it claimed, and the user
// actions on a failed one. Each is one transaction.

// owned loads a sending operation held by owner.
func (tx *txw) owned(id, owner string, to State) (*Operation, error) {
	op, err := tx.loadOp(id)
	if err != nil {
		return nil, err
	}
	if op.State != StateSending {
		return nil, &TransitionError{OperationID: id, From: op.State, To: to}
	}
	if op.LeaseOwner != owner {
		return nil, fmt.Errorf("%w: operation %s is leased by %q, not %q", ErrLeaseLost, id, op.LeaseOwner, owner)
	}
	return op, nil
}

// Release returns a claimed operation to pending without recording an
// outcome, ready at once: the worker is stopping or the account was
// paused. The attempt stays counted: a claim counts as an attempt,
// since a worker cannot always know whether its request reached the
// server (attempt_count > 0 means "may have"). maybeApplied says that
// the request went out and its send was cut off without an answer (see
// Operation.MaybeApplied).
func (s *Store) Release(ctx context.Context, id, owner string, maybeApplied bool) error {
	return s.release(ctx, id, owner, false, maybeApplied)
}

// ReleaseUnsent is Release for a claim whose request was certainly not
// sent (the session changed before the send, the daemon was stopping, the
// token could not be sent; a request that could not be built waits with
// RetryAt instead, so it is not claimed again at once): the claim's
// attempt is taken back, so attempt_count keeps
// meaning "may have reached the server", and an old operation that never
// left the machine is not mistaken for one the server may have
// forgotten.
func (s *Store) ReleaseUnsent(ctx context.Context, id, owner string) error {
	return s.release(ctx, id, owner, true, false)
}

func (s *Store) release(ctx context.Context, id, owner string, unsent, maybeApplied bool) error {
	return s.update(ctx, func(tx *txw) error {
		op, err := tx.owned(id, owner, StatePending)
		if err != nil {
			return err
		}
		if unsent && op.AttemptCount > 0 {
			op.AttemptCount--
		}
		op.MaybeApplied = op.MaybeApplied || maybeApplied
		return tx.release(op)
	})
}

// Complete records that the server applied the operation (a first answer
// or a replay) and reconciles its entity in the same transaction: the
// server id onto the entity, the entity synced when nothing else of it is
// queued, the delete's row removed, the operation done.
//
// Reconciliation is safe to redo: completing an operation that is
// already done changes nothing and returns nil. A worker whose lease was
// taken over may still complete: the server's answer is the same for
// every attempt of one key.
func (s *Store) Complete(ctx context.Context, id, owner string, c Completion) (Operation, error) {
	var out Operation
	err := s.update(ctx, func(tx *txw) error {
		op, err := tx.complete(id, c)
		if op != nil {
			out = *op
		}
		return err
	})
	return out, err
}

// CompleteAndClaim is Complete followed, in the same transaction, by
// Claim(account, nextOwner, lease): a worker records one outcome and
// takes its next operation with one commit instead of two. next is the
// zero Operation (and claimed false) when nothing of account is ready.
func (s *Store) CompleteAndClaim(ctx context.Context, id, owner string, c Completion, account, nextOwner string, lease time.Duration) (done, next Operation, claimed bool, err error) {
	if lease <= 0 {
		return done, next, false, fmt.Errorf("queue: claim: lease must be positive, got %v", lease)
	}
	err = s.update(ctx, func(tx *txw) error {
		claimed = false
		op, err := tx.complete(id, c)
		if err != nil {
			return err
		}
		done = *op
		n, err := tx.nextReady(account)
		if err != nil || n == nil {
			return err
		}
		if err := tx.claim(n, nextOwner, lease); err != nil {
			return err
		}
		next, claimed = *n, true
		return nil
	})
	return done, next, claimed, err
}

// complete moves a sending operation to done and reconciles its entity;
// an operation already done is returned unchanged.
func (tx *txw) complete(id string, c Completion) (*Operation, error) {
	op, err := tx.loadOp(id)
	if err != nil {
		return nil, err
	}
	if op.State == StateDone {
		return op, nil
	}
	if op.State != StateSending {
		return nil, &TransitionError{OperationID: id, From: op.State, To: StateDone}
	}
	if err := tx.finish(op); err != nil {
		return nil, err
	}
	op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
	op.LastErrorCode, op.LastError = "", ""
	op.CompletedAt = tx.now
	if err := tx.setState(op, StateDone); err != nil {
		return nil, err
	}
	if err := tx.saveOp(op); err != nil {
		return nil, err
	}
	if err := tx.put(tx.b(bucketDone), timeSeqKey(op.CompletedAt, op.Seq), nil); err != nil {
		return nil, err
	}
	if err := tx.releaseWaiters(op); err != nil {
		return nil, err
	}
	e, err := tx.loadEntity(op.AccountID, op.EntityType, op.EntityID)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return op, nil
	}
	changed, another := false, false
	if c.ServerID != "" && e.ServerID != c.ServerID {
		// Another record than the one the entity was based on, if any (a
		// create of an id deleted and swept on the server makes a new
		// one): what was known of the old one no longer applies, and the
		// new one's versions start again.
		another = e.ServerID != ""
		if e.Server != nil && (e.Server.ID == "" || e.Server.ID == e.ServerID) && another {
			e.Server = nil
		}
		e.ServerID, changed = c.ServerID, true
		if another {
			e.ServerVersion = 0
		}
		if e.Server != nil && e.Server.ID == e.ServerID {
			e.Server.ID = ""
		}
	}
	// A merging server's answer may hold other devices' fields (data
	// other than the op's payload). An update of the whole data queued
	// behind was made without them: based on this version, it would
	// overwrite them. So the version stays, the answer is kept beside
	// the entity, and that update goes on the version it was made on
	// (a merging server refuses it whole if another device wrote since).
	var answer json.RawMessage
	foreign := false
	if op.Type != OpDelete && !c.OtherData && c.Data != nil && c.ServerVersion > 0 {
		if data, err := canonicalJSON(c.Data); err == nil {
			answer = data
			if payload, err := canonicalJSON(op.Payload); err != nil || string(payload) != string(data) {
				_, known, err := tx.pendingPaths(e)
				if err != nil {
					return nil, err
				}
				foreign = !known
			}
		}
	}
	switch {
	case op.Type == OpCreate && c.OtherData:
		// Another device created the record first: its version is not
		// one the local data was made on. What follows goes with
		// baseVersion 0 (Entity.Unbased), and the feed brings the
		// record beside the local data.
		if !e.Unbased {
			e.Unbased, changed = true, true
		}
	case foreign && c.ServerVersion > e.ServerVersion:
		if srv := (ServerState{ID: e.ServerID, Version: c.ServerVersion, Data: answer}); e.newer(srv) {
			e.setServer(srv)
			changed = true
		}
	case c.ServerVersion > e.ServerVersion || c.ServerVersion > 0 && e.Unbased:
		// The version this device's own write made: the later ones of
		// the partition are based on it, and the feed's echo of it is
		// skipped.
		e.ServerVersion, e.Unbased, changed = c.ServerVersion, false, true
	}
	// The server now holds this op's data; after a delete, no data of the
	// entity (a create made again behind it sets it anew).
	synced := op.ID
	if op.Type == OpDelete {
		synced = ""
	}
	resent := false
	if op.Type == OpCreate && c.OtherData {
		// The server holds other data than this create's, so it does not
		// hold this op's data, even if the entity's delete is queued (a
		// discarded delete must not bring back data the server never had).
		synced = ""
		if !e.Deleted {
			// Send the entity's data, after whatever of it is queued.
			if err := tx.queueResend(e, c.ServerPayloadVersion); err != nil {
				return nil, err
			}
			resent, changed = true, true
		}
	}
	var merged []string
	if answer != nil && c.ServerVersion == e.ServerVersion && !e.serverAhead() {
		// The record as the server holds it after this write: a merging
		// server's answer holds other devices' fields too. The entity
		// takes it, its edits still queued laid over it.
		if payload, err := canonicalJSON(op.Payload); err != nil || string(payload) != string(answer) {
			synced = "" // the server holds other data than this op's
		}
		took, paths, err := tx.takeServerData(e, answer)
		if err != nil {
			return nil, err
		}
		if took {
			changed, merged = true, paths
		}
	} else if foreign {
		synced = ""
	}
	if e.SyncedOperationID != synced {
		e.SyncedOperationID, changed = synced, true
	}
	if op.Type != OpDelete {
		// The server holds the entity now: a full pass under way, whose
		// pages may have been read before this write reached it, must
		// not remove it at its end.
		if err := tx.markSeen(op.AccountID, op.EntityType, op.EntityID); err != nil {
			return nil, err
		}
	}
	// One load and at most one save of the row per completion.
	if err := tx.reconcile(e, changed); err != nil {
		return nil, err
	}
	if resent {
		// The entity stays pending, so reconcile reported nothing; its
		// version and last operation changed.
		return op, tx.entityEvent(e, EventEntityChanged)
	}
	if len(merged) > 0 {
		return op, tx.mergedEvent(e, "answer", merged)
	}
	return op, nil
}

// queueResend queues an update of e's current data at the tail of its
// partition, made by syncd rather than the app (see
// Completion.OtherData). Its payload version is above both e's version
// and serverVersion. The caller saves e.
func (tx *txw) queueResend(e *Entity, serverVersion int64) error {
	head, err := tx.partitionHead(e.AccountID, e.Type, e.ID)
	if err != nil {
		return err
	}
	e.Version = min(max(e.Version, serverVersion), math.MaxInt64-1) + 1
	e.LastOperationID = newID()
	op, err := tx.newOperation(e, OpUpdate, e.LastOperationID, "")
	if err != nil {
		return err
	}
	if err := tx.insertOperation(op, head == nil); err != nil {
		return err
	}
	return tx.opEvent(op)
}

// RetryAt records a transient failure: the operation waits in
// retry_waiting until at, then a claim may take it again. code is a
// stable error code, message a readable reason; maybeApplied says that
// the request went out without a definite answer (see
// Operation.MaybeApplied).
func (s *Store) RetryAt(ctx context.Context, id, owner string, at time.Time, code, message string, maybeApplied bool) error {
	return s.update(ctx, func(tx *txw) error {
		op, err := tx.owned(id, owner, StateRetryWaiting)
		if err != nil {
			return err
		}
		if err := tx.leaseDel(op); err != nil {
			return err
		}
		op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
		op.LastErrorCode, op.LastError = code, message
		op.MaybeApplied = op.MaybeApplied || maybeApplied
		op.NextAttemptAt = at
		if err := tx.setState(op, StateRetryWaiting); err != nil {
			return err
		}
		if err := tx.readyPut(op); err != nil {
			return err
		}
		return tx.saveOp(op)
	})
}

// RetryNow brings forward to now the next attempt of the account's
// partition heads that wait in retry_waiting after an error whose code is
// one of codes. The engine calls it when the remote answers again after
// network errors, so what backed off during an outage (up to minutes
// apart, with jitter) goes at once instead of over the following
// minutes; operations waiting after an answer have other codes and keep
// their time. One call looks at most at MaxListScan waiting heads (the
// earliest due first), whatever their code, and returns how many it
// moved.
func (s *Store) RetryNow(ctx context.Context, account string, codes ...string) (int, error) {
	moved := 0
	err := s.update(ctx, func(tx *txw) error {
		moved = 0
		b, err := tx.accountBucket(bucketReady, account, false)
		if b == nil || err != nil {
			return err
		}
		var due []*Operation
		c := b.Cursor()
		scanned := 0
		// Heads already due are skipped by the seek: there may be many.
		for k, _ := c.Seek(timeSeqKey(tx.now, math.MaxUint64)); k != nil && scanned < MaxListScan; k, _ = c.Next() {
			scanned++
			_, seq := splitTimeSeqKey(k)
			op, err := tx.loadOpBySeq(seq)
			if err != nil {
				return err
			}
			if op.State == StateRetryWaiting && op.NextAttemptAt.After(tx.now) && slices.Contains(codes, op.LastErrorCode) {
				due = append(due, op)
			}
		}
		for _, op := range due {
			if err := tx.readyDel(op); err != nil {
				return err
			}
			op.NextAttemptAt = tx.now
			if err := tx.readyPut(op); err != nil {
				return err
			}
			if err := tx.saveOp(op); err != nil {
				return err
			}
		}
		moved = len(due)
		return nil
	})
	return moved, err
}

// Fail records a permanent failure: the operation stays at the head of
// its partition (later operations of the entity wait behind it) until the
// user retries or discards it; the entity turns failed with a readable
// syncError.
//
// maybeApplied says that this attempt may have been applied by the
// server although the outcome does not say so (see
// Operation.MaybeApplied).
func (s *Store) Fail(ctx context.Context, id, owner, code, message string, maybeApplied bool) error {
	return s.fail(ctx, id, owner, code, message, false, maybeApplied)
}

// Decline is Fail for an operation the server declined: no attempt under
// its key was applied, so it is marked Declined. The user's retry, or the
// next update of the entity, then makes a new attempt with the entity's
// current data under a new key (see Operation.Declined). The caller
// establishes that: a refusal of this attempt and no earlier attempt
// that may have been applied (Operation.MaybeApplied), or the server's
// replay of a stored refusal, which is the answer of the key's only
// execution.
func (s *Store) Decline(ctx context.Context, id, owner, code, message string) error {
	return s.fail(ctx, id, owner, code, message, true, false)
}

func (s *Store) fail(ctx context.Context, id, owner, code, message string, declined, maybeApplied bool) error {
	return s.update(ctx, func(tx *txw) error {
		op, err := tx.failOwned(id, owner, code, message, declined, maybeApplied)
		if err != nil {
			return err
		}
		return tx.reconcileEntity(op.AccountID, op.EntityType, op.EntityID)
	})
}

// failOwned moves the operation id, held by owner, to permanent_failed
// with code and message. The caller reconciles its entity.
func (tx *txw) failOwned(id, owner, code, message string, declined, maybeApplied bool) (*Operation, error) {
	op, err := tx.owned(id, owner, StatePermanentFailed)
	if err != nil {
		return nil, err
	}
	if err := tx.leaseDel(op); err != nil {
		return nil, err
	}
	op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
	op.LastErrorCode, op.LastError = code, message
	// Declined is the caller's proof that nothing under the key was
	// applied, which settles what MaybeApplied left open.
	op.Declined = declined
	op.MaybeApplied = !declined && (op.MaybeApplied || maybeApplied)
	if err := tx.setState(op, StatePermanentFailed); err != nil {
		return nil, err
	}
	return op, tx.saveOp(op)
}

// Retry is the user's retry of a permanently failed operation: back to
// pending, ready at once. Its entity turns pending. An operation the
// server did not decline keeps its key and payload: the server may hold
// its effect and answers the same key with it. A declined one is a new
// attempt (see Operation.Declined): it takes the entity's current data,
// so an edit made to fix it goes with it, and a new RemoteKey.
func (s *Store) Retry(ctx context.Context, id string) (Operation, error) {
	var out Operation
	err := s.update(ctx, func(tx *txw) error {
		op, err := tx.loadOp(id)
		if err != nil {
			return err
		}
		if op.State != StatePermanentFailed {
			return fmt.Errorf("%w: only a permanently failed operation can be retried by the user; %s is %s", ErrIllegalTransition, id, op.State)
		}
		if err := tx.userRetry(op); err != nil {
			return err
		}
		out = *op
		return tx.reconcileEntity(op.AccountID, op.EntityType, op.EntityID)
	})
	return out, err
}

// userRetry moves a permanently failed operation, the head of its
// partition, back to pending and ready, renewing a declined one. The
// caller reconciles the entity.
func (tx *txw) userRetry(op *Operation) error {
	if op.Declined {
		if op.Type != OpDelete {
			e, err := tx.loadEntity(op.AccountID, op.EntityType, op.EntityID)
			if err != nil {
				return err
			}
			if e == nil {
				return fmt.Errorf("queue: operation %s: entity %s/%s is missing", op.ID, op.EntityType, op.EntityID)
			}
			if err := tx.setPayload(op, e.Data); err != nil {
				return err
			}
			if op.Paths != nil {
				// Its fields, in the data it now carries: one a later
				// write made a scalar is named as that scalar.
				op.Paths = fitPaths(fieldmerge.Clip(op.Paths, e.Data))
			}
			op.PayloadVersion = e.Version
			op.PayloadFingerprint = payloadFingerprint(op)
		}
		op.RemoteKey = uuid.NewString()
		op.Declined, op.MaybeApplied = false, false
	}
	if err := tx.setState(op, StatePending); err != nil {
		return err
	}
	op.NextAttemptAt = tx.now
	op.UserRetriedAt = tx.now
	op.LastErrorCode, op.LastError = "", ""
	if !tx.held(op) {
		if err := tx.readyPut(op); err != nil {
			return err
		}
	}
	return tx.saveOp(op)
}

// Discard is the user's decision to drop a permanently failed operation.
// The operation row is removed. Discarding a create also removes the
// local entity and every later operation of it, since none of them can
// reach a server that never got the entity; but if the app deleted the
// entity and created it again under the same id, the new create and what
// follows it stay, and so does the entity. Discarding an update brings
// the data back to the server's (revertToSynced) when it can; discarding
// a delete brings the entity back, and after a declined one sends its
// data when the server may not hold it (resendIfUnsynced).
func (s *Store) Discard(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *txw) error {
		op, err := tx.loadOp(id)
		if err != nil {
			return err
		}
		if op.State != StatePermanentFailed {
			return fmt.Errorf("%w: only a permanently failed operation can be discarded; %s is %s", ErrIllegalTransition, id, op.State)
		}
		victims := []*Operation{op}
		recreated := false
		if op.Type == OpCreate {
			ops, err := tx.partitionOps(op.AccountID, op.EntityType, op.EntityID)
			if err != nil {
				return err
			}
			for i, o := range ops { // ops[0] is op, the failed head
				if i > 0 && o.Type == OpCreate {
					victims, recreated = ops[:i], true
					break
				}
			}
			if !recreated {
				victims = ops
			}
		}
		for _, v := range victims {
			if err := tx.purgeOp(v); err != nil {
				return err
			}
		}
		e, err := tx.loadEntity(op.AccountID, op.EntityType, op.EntityID)
		if err != nil || e == nil {
			return err
		}
		if op.Type == OpDelete {
			if err := tx.createBecomesUpdate(op); err != nil {
				return err
			}
		}
		if op.Type != OpCreate && !op.Declined && e.SyncedOperationID != "" {
			// Not refused: the server may hold this op's effect, and what
			// it holds is no longer known.
			e.SyncedOperationID = ""
			if err := tx.saveEntity(e); err != nil {
				return err
			}
		}
		switch {
		case op.Type == OpCreate && !recreated && e.Server != nil && !e.Server.Deleted:
			// The server holds a record under the id after all (another
			// device's, which a pull kept beside the refused create): the
			// entity becomes it (reconcile takes it), not removed.
			e.Deleted = false
			e.ServerVersion, e.Unbased = 0, false
			if e.Server.ID != "" {
				e.ServerID, e.Server.ID = e.Server.ID, ""
			}
			if err := tx.saveEntity(e); err != nil {
				return err
			}
		case op.Type == OpCreate && !recreated:
			if err := tx.deleteEntity(e.AccountID, e.Type, e.ID); err != nil {
				return err
			}
			return tx.entityEvent(e, EventEntityRemoved)
		case op.Type == OpDelete && e.Deleted:
			e.Deleted = false
			if op.Declined {
				if err := tx.resendIfUnsynced(e); err != nil {
					return err
				}
			}
			if err := tx.saveEntity(e); err != nil {
				return err
			}
		case op.Type == OpUpdate:
			// Back to what the server holds: the last synced payload
			// (after a refusal), or the server's record if a pull kept it
			// beside the entity (reconcile takes it); otherwise read
			// again from the server (stale until then).
			reverted := false
			if op.Declined {
				if reverted, err = tx.revertToSynced(e); err != nil {
					return err
				}
			}
			if !reverted {
				if err := tx.needRefresh(e); err != nil {
					return err
				}
			}
		}
		return tx.reconcileEntity(op.AccountID, op.EntityType, op.EntityID)
	})
}

// revertToSynced is part of discarding an update of e that the server
// declined: when nothing else of e is queued, its data goes back to what
// the server holds, the payload of its last synced operation, if that is
// still kept. (With updates queued behind, the discarded change is in
// their data too, and the entity stays as it is.) The caller reconciles
// the entity, which reports the change.
//
// reverted is false when what the server holds is not known here: no
// synced operation (a pulled entity), or it was swept. (With updates
// queued behind, it is true: they carry the data on.)
func (tx *txw) revertToSynced(e *Entity) (reverted bool, err error) {
	head, err := tx.partitionHead(e.AccountID, e.Type, e.ID)
	if err != nil || head != nil {
		return head != nil, err
	}
	if e.SyncedOperationID == "" || e.serverAhead() {
		return false, nil
	}
	synced, err := tx.loadOp(e.SyncedOperationID)
	if errors.Is(err, ErrOperationNotFound) {
		return false, nil // swept
	}
	if err != nil {
		return false, err
	}
	// Swept, and the id taken again by another write (an app may reuse
	// an Idempotency-Key once its operation is gone): not this entity's.
	if synced.State != StateDone || synced.Type == OpDelete || synced.AccountID != e.AccountID ||
		synced.EntityType != e.Type || synced.EntityID != e.ID || len(synced.Payload) == 0 {
		return false, nil
	}
	e.Data = synced.Payload
	e.Version++
	e.UpdatedAt = tx.now
	return true, tx.saveEntity(e)
}

// resendIfUnsynced is part of discarding a delete of e that the server
// declined: e is back, and the server holds it live, but not necessarily
// with e's data. Updates made before the delete may never have gone: a
// mergeable one superseded by the delete, or a declined one the delete
// dropped. Unless something of e is still queued (it carries e's data)
// or the server is known to hold exactly e's data (its last synced
// operation's payload), an update of e's data is queued, as for a create
// answered with other data. The caller saves e.
func (tx *txw) resendIfUnsynced(e *Entity) error {
	head, err := tx.partitionHead(e.AccountID, e.Type, e.ID)
	if err != nil || head != nil {
		return err
	}
	if e.serverAhead() && !e.serverUnheld() {
		// The server's newer record is known beside the entity (the
		// delete was refused for it: a conflict): the entity takes it
		// (reconcile), and nothing the user did not write is sent.
		return nil
	}
	if e.SyncedOperationID != "" {
		synced, err := tx.loadOp(e.SyncedOperationID)
		if err != nil && !errors.Is(err, ErrOperationNotFound) {
			return err
		}
		if err == nil && synced.State == StateDone && synced.Type != OpDelete && synced.AccountID == e.AccountID &&
			synced.EntityType == e.Type && synced.EntityID == e.ID && bytes.Equal(synced.Payload, e.Data) {
			return nil
		}
	}
	return tx.queueResend(e, 0)
}

// createBecomesUpdate is part of discarding the delete del: if the server
// declined it, a create of the same id made again behind it, never sent,
// now follows an entity the server still holds live, and would be
// answered with the server's record, unchanged. It becomes an update with
// the same data, which the server applies.
func (tx *txw) createBecomesUpdate(del *Operation) error {
	if !del.Declined {
		// The delete may have been applied: a create brings the record
		// back (the reference server does), an update would find it gone.
		return nil
	}
	next, err := tx.partitionHead(del.AccountID, del.EntityType, del.EntityID)
	if err != nil || next == nil || next.Type != OpCreate || next.AttemptCount > 0 {
		return err
	}
	e, err := tx.loadEntity(del.AccountID, del.EntityType, del.EntityID)
	if err != nil || e == nil || e.ServerID == "" {
		return err
	}
	next.Type = OpUpdate
	next.PayloadFingerprint = payloadFingerprint(next)
	return tx.saveOp(next)
}

// purgeOp removes an unfinished operation and its indexes.
func (tx *txw) purgeOp(op *Operation) error {
	if err := tx.finish(op); err != nil {
		return err
	}
	if err := tx.count(op, op.State, -1); err != nil {
		return err
	}
	if err := tx.del(tx.b(bucketOps), u64(op.Seq)); err != nil {
		return err
	}
	if err := tx.del(tx.b(bucketOpIDs), []byte(op.ID)); err != nil {
		return err
	}
	if op.After != "" {
		if err := tx.del(tx.b(bucketWaits), waitKey(op.After, op.Seq)); err != nil {
			return err
		}
	}
	// Given up: what waited for it in its ordered batch goes on.
	if err := tx.releaseWaiters(op); err != nil {
		return err
	}
	return tx.event(Event{
		Type:        EventOperationPurged,
		AccountID:   op.AccountID,
		EntityType:  op.EntityType,
		EntityID:    op.EntityID,
		OperationID: op.ID,
		State:       op.State,
	})
}
