package queue

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Session is the account whose operations are sent, and its token. It is
// kept in the data file (mode 0600) so sending resumes after a restart.
type Session struct {
	AccountID   string `json:"accountId"`
	AccessToken string `json:"accessToken"`
}

// SaveSession stores the current session and appends an event of type
// typ with data (which must not hold the token).
func (s *Store) SaveSession(ctx context.Context, sess *Session, e Event) error {
	return s.update(ctx, func(tx *txw) error {
		meta := tx.b(bucketMeta)
		if sess != nil && meta.Get(purgeKey(sess.AccountID)) != nil {
			return fmt.Errorf("%w: %s", ErrPurging, sess.AccountID)
		}
		if sess == nil {
			if err := tx.del(meta, metaSession); err != nil {
				return err
			}
		} else {
			v, err := json.Marshal(sess)
			if err != nil {
				return err
			}
			if err := tx.put(meta, metaSession, v); err != nil {
				return err
			}
		}
		if e.Type == "" {
			return nil
		}
		return tx.event(e)
	})
}

// LoadSession returns the stored session, or nil.
func (s *Store) LoadSession() (*Session, error) {
	var sess *Session
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(metaSession)
		if v == nil {
			return nil
		}
		sess = new(Session)
		return json.Unmarshal(v, sess)
	})
	return sess, err
}

// AppendEvent appends an event that is not a data change (session,
// connectivity) to the change log, so every event shares one seq.
func (s *Store) AppendEvent(ctx context.Context, e Event) (Event, error) {
	var out Event
	err := s.update(ctx, func(tx *txw) error {
		if err := tx.event(e); err != nil {
			return err
		}
		out = tx.events[len(tx.events)-1]
		return nil
	})
	return out, err
}

// PurgeAccount deletes every entity and operation of account, and the
// stored session if it is that account's (logout with the purge policy).
// Unless force is set it refuses, with ErrNotPurgeable, while the account
// has operations that have not reached the server. It returns how many
// of those it removed. It is StartPurge then FinishPurge.
func (s *Store) PurgeAccount(ctx context.Context, account string, force bool) (removed int, err error) {
	if removed, err = s.StartPurge(ctx, account, force); err != nil {
		return 0, err
	}
	return removed, s.FinishPurge(ctx, account)
}

// purgeChunk bounds the rows one purge transaction deletes (and
// purgeScanChunk the operation rows it reads looking for the account's
// done ones), so that app writes, claims and status reads commit between
// a big account's chunks instead of waiting for one long transaction.
// Tests lower them.
var (
	purgeChunk     = 1000
	purgeScanChunk = 20000
	// purgeChunkDone, when set, runs after each chunk of FinishPurge; an
	// error stops the purge there (as a crash would).
	purgeChunkDone func(chunk int) error
)

// StartPurge begins purging account, in one transaction: unless force is
// set it refuses, with ErrNotPurgeable, while the account has operations
// that have not reached the server; it removes the stored session if it
// is that account's, and records that the purge runs, so that the account
// cannot sign in (SaveSession answers ErrPurging) until FinishPurge has
// deleted its rows, and a purge a crash cut short is finished by the next
// Open. It returns how many unfinished operations the purge removes.
func (s *Store) StartPurge(ctx context.Context, account string, force bool) (unfinished int, err error) {
	err = s.update(ctx, func(tx *txw) error {
		unfinished = 0
		counts := tx.b(bucketCounts)
		for _, st := range stateTable {
			if v := counts.Get(accountCountKey(account, State(st))); v != nil && State(st) != StateDone {
				unfinished += int(readU64(v))
			}
		}
		if unfinished > 0 && !force {
			return fmt.Errorf("%w: %d operations of account %s have not reached the server", ErrNotPurgeable, unfinished, account)
		}
		meta := tx.b(bucketMeta)
		if err := tx.put(meta, purgeKey(account), nil); err != nil {
			return err
		}
		// The session goes in the same transaction: a crash never leaves
		// a half-purged account signed in.
		if v := meta.Get(metaSession); v != nil {
			var sess Session
			if err := json.Unmarshal(v, &sess); err == nil && sess.AccountID == account {
				if err := tx.del(meta, metaSession); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return unfinished, err
}

// FinishPurge deletes account's rows in transactions of at most
// purgeChunk rows: its unfinished operations, then its entities, then its
// done operations; the last one appends the account.purged event and ends
// the purge. Safe to call again after an error or a crash: it goes on
// where the rows say.
func (s *Store) FinishPurge(ctx context.Context, account string) error {
	var after uint64 // the done-operation walk's position
	for chunk := 1; ; chunk++ {
		finished := false
		err := s.update(ctx, func(tx *txw) error {
			var err error
			finished, after, err = tx.purgeChunk(account, after)
			return err
		})
		if err != nil {
			return err
		}
		if finished {
			return nil
		}
		if purgeChunkDone != nil {
			if err := purgeChunkDone(chunk); err != nil {
				return err
			}
		}
	}
}

// purgeChunk deletes up to purgeChunk rows of account, the first kind
// that has any left: entities, each with its unfinished operations (so no
// entity is ever left pending without an operation), then unfinished
// operations without an entity row, then done operations, looked for from
// seq after on, at most purgeScanChunk rows a time. It reports the purge
// finished once nothing is left, and then ends it.
func (tx *txw) purgeChunk(account string, after uint64) (finished bool, next uint64, err error) {
	prefix := []byte(account + "\x00")
	var keys [][]byte
	c := tx.b(bucketEntities).Cursor()
	for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix) && len(keys) < purgeChunk; k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := tx.purgeOps(k); err != nil {
			return false, after, err
		}
		if err := tx.deleteEntityKey(k); err != nil {
			return false, after, err
		}
	}
	if len(keys) > 0 {
		return false, after, nil
	}
	// An unfinished operation has an entity row (Check), but should one
	// have none, it goes too: looked for once, before the walk of done
	// operations begins.
	if after == 0 {
		var stray []uint64
		ops := tx.b(bucketOps)
		for seq := range unfinishedSeqs(tx.tx, 0) {
			op, _, err := decodeOp(seq, ops.Get(u64(seq)))
			if err != nil {
				return false, after, err
			}
			if op.AccountID == account {
				stray = append(stray, seq)
			}
		}
		for _, seq := range stray {
			op, err := tx.loadOpBySeq(seq)
			if err != nil {
				return false, after, err
			}
			if err := tx.purgeOp(op); err != nil {
				return false, after, err
			}
		}
	}

	// Done operations of the account: their rows go too. Nothing indexes
	// them by account, so the walk reads every operation row, a bounded
	// number per transaction.
	var done []uint64
	scanned := 0
	c = tx.b(bucketOps).Cursor()
	k, v := c.Seek(u64(after))
	for ; k != nil && scanned < purgeScanChunk && len(done) < purgeChunk; k, v = c.Next() {
		scanned++
		seq := readU64(k)
		next = seq + 1
		op, _, err := decodeOp(seq, v) // its payload is not needed
		if err != nil {
			return false, after, err
		}
		if op.AccountID == account && op.State == StateDone {
			done = append(done, seq)
		}
	}
	for _, seq := range done {
		op, err := tx.loadOpBySeq(seq)
		if err != nil {
			return false, after, err
		}
		if err := tx.deleteDone(op); err != nil {
			return false, after, err
		}
	}
	if k != nil {
		return false, next, nil
	}
	if err := tx.del(tx.b(bucketMeta), purgeKey(account)); err != nil {
		return false, next, err
	}
	// Its place in the changes feed: a later sign-in pulls everything.
	if err := tx.del(tx.b(bucketMeta), pullKey(account)); err != nil {
		return false, next, err
	}
	if err := tx.clearSeen(account); err != nil {
		return false, next, err
	}
	return true, next, tx.event(Event{Type: EventAccountPurged, AccountID: account})
}

// purgeOps purges the unfinished operations of the partition whose
// entity row's key is k.
func (tx *txw) purgeOps(k []byte) error {
	v := tx.b(bucketEntities).Get(k)
	if v == nil {
		return nil
	}
	_, seqs, _, err := entityLists(k, v)
	if err != nil {
		return err
	}
	for _, seq := range seqs {
		op, err := tx.loadOpBySeq(seq)
		if err != nil {
			return err
		}
		if err := tx.purgeOp(op); err != nil {
			return err
		}
	}
	return nil
}

// purgeKey is the meta key that records a purge of account in progress.
func purgeKey(account string) []byte { return append([]byte(metaPurgePrefix), account...) }

// metaPurgePrefix starts the meta keys of purges in progress.
const metaPurgePrefix = "purging\x00"

// purgesInProgress lists the accounts whose purge a crash cut short.
func purgesInProgress(tx *bolt.Tx) []string {
	var accounts []string
	c := tx.Bucket(bucketMeta).Cursor()
	for k, _ := c.Seek([]byte(metaPurgePrefix)); k != nil && hasPrefix(k, []byte(metaPurgePrefix)); k, _ = c.Next() {
		accounts = append(accounts, string(k[len(metaPurgePrefix):]))
	}
	return accounts
}

// EventAccountPurged is appended when an account's data is purged.
const EventAccountPurged = "account.purged"

func hasPrefix(k, prefix []byte) bool {
	return len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix)
}
