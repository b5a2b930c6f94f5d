package queue

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Claim takes the next operation of account that may be sent now: a
// partition head whose next_attempt_at has come, or one whose lease has
// expired (its worker died or hung). It moves the operation to sending,
// sets the lease (owner, now+lease) and counts the attempt. Cost: one
// cursor seek on the account's ready index, O(log n) in the queue's size.
// It returns ErrNoReady when nothing is ready.
func (s *Store) Claim(ctx context.Context, account, owner string, lease time.Duration) (Operation, error) {
	if lease <= 0 {
		return Operation{}, fmt.Errorf("queue: claim: lease must be positive, got %v", lease)
	}
	var out Operation
	err := s.update(ctx, func(tx *txw) error {
		op, err := tx.nextReady(account)
		if err != nil {
			return err
		}
		if op == nil {
			return ErrNoReady
		}
		if err := tx.claim(op, owner, lease); err != nil {
			return err
		}
		out = *op
		return nil
	})
	return out, err
}

// ClaimChains is Claim for up to n operations at once, in one
// transaction, for a batched send: it takes ready operations as Claim
// would, one after another, until it has n, or their payloads would
// pass maxBytes (the first is taken whatever its size), or none is
// ready; they share the lease owner. Behind each head it also takes,
// with maxFollow above 0, the updates queued after it in its partition
// (its followers, at most maxFollow), for a remote that applies a
// batch's chained items in order (the next one only when the one before
// it was applied, made on the version it produced). A chain is [head,
// followers...]; followers count against n and maxBytes too. It returns
// ErrNoReady when it took none. Followers join only a head that is
// an update of an entity the server already holds (a create's record
// and so the follower's address are known only from its answer), and
// are themselves updates that are pending (not waiting out a backoff)
// and not held by an ordered group; the first operation that is not
// ends the chain. The followers share the head's owner and lease; they
// are sending like it, but are not heads: a worker records the chain's
// outcomes in order (a follower's release before its predecessor's
// outcome when that is not done), and the head's lease recovered after
// expiry returns its followers to pending.
func (s *Store) ClaimChains(ctx context.Context, account, owner string, lease time.Duration, n, maxBytes, maxFollow int) ([][]Operation, error) {
	if lease <= 0 || n <= 0 {
		return nil, fmt.Errorf("queue: claim: lease and n must be positive, got %v, %d", lease, n)
	}
	var out [][]Operation
	err := s.update(ctx, func(tx *txw) error {
		out = out[:0]
		size, count := 0, 0
		for count < n {
			op, err := tx.nextReady(account)
			if err != nil {
				return err
			}
			if op == nil {
				break
			}
			if count > 0 && size+len(op.Payload) > maxBytes {
				break
			}
			if err := tx.claim(op, owner, lease); err != nil {
				return err
			}
			size += len(op.Payload)
			count++
			chain := []Operation{*op}
			if maxFollow > 0 && count < n && op.Type == OpUpdate {
				fs, err := tx.claimFollowers(op, owner, lease, min(maxFollow, n-count), maxBytes-size)
				if err != nil {
					return err
				}
				for _, f := range fs {
					size += len(f.Payload)
					chain = append(chain, *f)
				}
				count += len(fs)
			}
			out = append(out, chain)
		}
		if len(out) == 0 {
			return ErrNoReady
		}
		return nil
	})
	return out, err
}

// claimFollowers claims, behind head (just claimed), at most max updates
// queued after it in its partition, within room bytes of payload (see
// ClaimChains).
func (tx *txw) claimFollowers(head *Operation, owner string, lease time.Duration, max, room int) ([]*Operation, error) {
	e, err := tx.loadEntity(head.AccountID, head.EntityType, head.EntityID)
	if err != nil || e == nil || e.ServerID == "" {
		return nil, err
	}
	list, err := tx.partitionSeqs(head.AccountID, head.EntityType, head.EntityID)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, seq := range list {
		if seq > head.Seq && len(seqs) < max {
			seqs = append(seqs, seq)
		}
	}
	var fs []*Operation
	for _, seq := range seqs {
		op, err := tx.loadOpBySeq(seq)
		if err != nil {
			return nil, err
		}
		if op.Type != OpUpdate || op.State != StatePending || op.After != "" || len(op.Payload) > room {
			break
		}
		if err := tx.claim(op, owner, lease); err != nil {
			return nil, err
		}
		room -= len(op.Payload)
		fs = append(fs, op)
	}
	return fs, nil
}

// recoverFollowers returns to pending the operations sending behind op
// in its partition: a chain's followers, whose head's lease expired.
// Their sends may have gone out.
func (tx *txw) recoverFollowers(op *Operation) error {
	ops, err := tx.partitionOps(op.AccountID, op.EntityType, op.EntityID)
	if err != nil {
		return err
	}
	for _, f := range ops {
		if f.Seq <= op.Seq || f.State != StateSending {
			continue
		}
		f.MaybeApplied = true
		if err := tx.release(f); err != nil {
			return err
		}
	}
	return nil
}

// nextReady finds the operation Claim would take, without changing it.
func (tx *txw) nextReady(account string) (*Operation, error) {
	if b, _ := tx.accountBucket(bucketReady, account, false); b != nil {
		if k, _ := b.Cursor().First(); k != nil {
			if at, seq := splitTimeSeqKey(k); !at.After(tx.now) {
				return tx.loadOpBySeq(seq)
			}
		}
	}
	if b, _ := tx.accountBucket(bucketLeases, account, false); b != nil {
		if k, _ := b.Cursor().First(); k != nil {
			if at, seq := splitTimeSeqKey(k); !at.After(tx.now) {
				return tx.loadOpBySeq(seq)
			}
		}
	}
	return nil, nil
}

func (tx *txw) claim(op *Operation, owner string, lease time.Duration) error {
	switch op.State {
	case StateSending: // lease expired: recover it first
		if err := tx.leaseDel(op); err != nil {
			return err
		}
		// A chain's followers behind it go back to pending: they are
		// sent after it again, chained or alone.
		if err := tx.recoverFollowers(op); err != nil {
			return err
		}
		op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
		op.MaybeApplied = true // the lost worker's send may have gone out
		if err := tx.setState(op, StatePending); err != nil {
			return err
		}
	case StateRetryWaiting, StatePending:
		if err := tx.readyDel(op); err != nil {
			return err
		}
		if op.State == StateRetryWaiting {
			if err := tx.setState(op, StatePending); err != nil {
				return err
			}
		}
	}
	op.AttemptCount++
	op.LeaseOwner = owner
	op.LeaseExpiresAt = tx.now.Add(lease)
	if err := tx.setState(op, StateSending); err != nil {
		return err
	}
	if err := tx.leasePut(op); err != nil {
		return err
	}
	return tx.saveOp(op)
}

// NextWake returns the earliest time at which Claim(account) could find
// something: the first ready operation's next_attempt_at or the first
// lease expiry. ok is false when the account has nothing queued that a
// claim could take.
func (s *Store) NextWake(account string) (at time.Time, ok bool, err error) {
	err = s.db.View(func(btx *bolt.Tx) error {
		for _, index := range [][]byte{bucketReady, bucketLeases} {
			b := btx.Bucket(index).Bucket([]byte(account))
			if b == nil {
				continue
			}
			if k, _ := b.Cursor().First(); k != nil {
				t, _ := splitTimeSeqKey(k)
				if !ok || t.Before(at) {
					at, ok = t, true
				}
			}
		}
		return nil
	})
	return at, ok, err
}

// recoverSending returns every sending operation to pending. Open calls
// it: the file lock makes this process the only writer, so whatever is
// sending was left by a process that died.
func (tx *txw) recoverSending() (int, error) {
	leases := tx.b(bucketLeases)
	var accounts [][]byte
	if err := leases.ForEachBucket(func(k []byte) error {
		accounts = append(accounts, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, account := range accounts {
		b := leases.Bucket(account)
		var seqs []uint64
		if err := b.ForEach(func(k, _ []byte) error {
			_, seq := splitTimeSeqKey(k)
			seqs = append(seqs, seq)
			return nil
		}); err != nil {
			return n, err
		}
		for _, seq := range seqs {
			op, err := tx.loadOpBySeq(seq)
			if err != nil {
				return n, err
			}
			op.MaybeApplied = true // the dead process's send may have gone out
			if err := tx.release(op); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// release returns a sending op to pending, ready at once when it heads
// its partition (a chain's follower is not ready before the operations
// ahead of it are done).
func (tx *txw) release(op *Operation) error {
	if err := tx.leaseDel(op); err != nil {
		return err
	}
	if err := tx.setState(op, StatePending); err != nil {
		return err
	}
	op.LeaseOwner, op.LeaseExpiresAt = "", time.Time{}
	op.NextAttemptAt = tx.now
	head, err := tx.partitionHead(op.AccountID, op.EntityType, op.EntityID)
	if err != nil {
		return err
	}
	if head == nil || head.Seq == op.Seq {
		if err := tx.readyPut(op); err != nil {
			return err
		}
	}
	return tx.saveOp(op)
}
