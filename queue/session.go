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
// stored session if it is that account's (logout with the purge policy). Unless force is set it refuses, with
// ErrNotPurgeable, while the account has operations that have not
// reached the server.
func (s *Store) PurgeAccount(ctx context.Context, account string, force bool) (removed int, err error) {
	err = s.update(ctx, func(tx *txw) error {
		removed = 0
		prefix := []byte(account + "\x00")
		var unfinished [][]byte
		c := tx.b(bucketPartitions).Cursor()
		for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Next() {
			unfinished = append(unfinished, append([]byte(nil), k[len(k)-8:]...))
		}
		if len(unfinished) > 0 && !force {
			return fmt.Errorf("%w: %d operations of account %s have not reached the server", ErrNotPurgeable, len(unfinished), account)
		}
		for _, seq := range unfinished {
			op, err := tx.loadOpBySeq(readU64(seq))
			if err != nil {
				return err
			}
			if err := tx.purgeOp(op); err != nil {
				return err
			}
			removed++
		}
		var keys [][]byte
		c = tx.b(bucketEntities).Cursor()
		for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			if err := tx.deleteEntityKey(k); err != nil {
				return err
			}
		}
		// Done operations of the account: their rows go too.
		var done []uint64
		if err := tx.b(bucketOps).ForEach(func(k, v []byte) error {
			op, _, err := decodeOp(readU64(k), v) // its payload is not needed
			if err != nil {
				return err
			}
			if op.AccountID == account && op.State == StateDone {
				done = append(done, op.Seq)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, seq := range done {
			op, err := tx.loadOpBySeq(seq)
			if err != nil {
				return err
			}
			if err := tx.deleteDone(op); err != nil {
				return err
			}
		}
		// The account's stored session goes in the same transaction: a
		// crash never leaves a purged account signed in.
		if v := tx.b(bucketMeta).Get(metaSession); v != nil {
			var sess Session
			if err := json.Unmarshal(v, &sess); err == nil && sess.AccountID == account {
				if err := tx.del(tx.b(bucketMeta), metaSession); err != nil {
					return err
				}
			}
		}
		return tx.event(Event{Type: EventAccountPurged, AccountID: account})
	})
	return removed, err
}

// EventAccountPurged is appended when an account's data is purged.
const EventAccountPurged = "account.purged"

func hasPrefix(k, prefix []byte) bool {
	return len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix)
}
