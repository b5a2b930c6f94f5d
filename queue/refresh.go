package queue

import (
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Refreshing: reading one record of the server again and settling the
// local entity with it. An entity whose data the server may not hold
// (a discarded change the server refused or may have applied, when what
// it holds is not known here) turns stale with StaleRefreshNeeded and is
// put in the account's refresh set; the daemon reads each again
// (transport.Client.Record) and applies it with ApplyRecord. The app can
// ask for a refresh of any entity (POST .../refresh), a stale one over
// the data limit included.

func refreshKey(account string) []byte { return append([]byte("refresh\x00"), account...) }

// staleError is the syncError of a stale entity whose server record is
// srv.
func staleError(srv *ServerState) string {
	switch srv.Missing {
	case StaleTooLarge:
		return fmt.Sprintf("the server holds version %d, bigger than this device's data limit: raise the limit and refresh it (%s)", srv.Version, StaleTooLarge)
	case StaleRefreshNeeded:
		return fmt.Sprintf("what the server holds is not known here after a discarded change: syncd reads it again (%s)", StaleRefreshNeeded)
	}
	return fmt.Sprintf("the server holds version %d, not held here (%s)", srv.Version, srv.Missing)
}

// markRefresh puts e in its account's refresh set (on) or takes it out.
func (tx *txw) markRefresh(e *Entity, on bool) error {
	meta := tx.b(bucketMeta)
	b := meta.Bucket(refreshKey(e.AccountID))
	k := entityKey(e.AccountID, e.Type, e.ID)
	switch {
	case on && b == nil:
		tx.wrote = true
		var err error
		if b, err = meta.CreateBucket(refreshKey(e.AccountID)); err != nil {
			return err
		}
		fallthrough
	case on:
		if b.Get(k) != nil {
			return nil
		}
		return tx.put(b, k, []byte{1})
	case b != nil && b.Get(k) != nil:
		return tx.del(b, k)
	}
	return nil
}

// needRefresh marks e, whose local data the server may not hold, for a
// refresh: when nothing else of it is queued and the server's record is
// not already kept beside it, it turns stale (StaleRefreshNeeded) until
// the record is read again. The caller reconciles e.
func (tx *txw) needRefresh(e *Entity) error {
	if e.ServerID == "" || e.serverAhead() {
		return nil // never on the server, or its newer record is taken
	}
	head, err := tx.partitionHead(e.AccountID, e.Type, e.ID)
	if err != nil || head != nil {
		return err
	}
	e.Server = &ServerState{Version: e.ServerVersion, Missing: StaleRefreshNeeded}
	return tx.saveEntity(e)
}

// EntityRef names an entity of an account.
type EntityRef struct {
	Type, ID string
}

// NeedsRefresh returns up to limit entities of account that wait to be
// read again from the server (stale with StaleRefreshNeeded).
func (s *Store) NeedsRefresh(account string, limit int) ([]EntityRef, error) {
	var out []EntityRef
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta).Bucket(refreshKey(account))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(out) < limit; k, _ = c.Next() {
			_, typ, id, ok := splitEntityKey(k)
			if ok {
				out = append(out, EntityRef{Type: typ, ID: id})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: needs refresh: %w", err)
	}
	return out, nil
}

// ApplyRecord settles the entity entityType/id of account with the
// server's record of it, read again (a refresh): rec is that record, or
// nil when the server holds nothing under the id (never created, or
// deleted and swept). The record is taken as a change of the feed would
// be, and also at the version the entity knows (what the server holds
// now replaces local data it may not hold); an older one (a replica that
// lags) changes nothing. With nothing under the id, a synced entity the
// server once had is removed, and one with unsent changes keeps them,
// the record's removal beside them. It returns the entity as it is now;
// removed is set when it left the store. An id neither here nor live on
// the server is ErrEntityNotFound.
func (s *Store) ApplyRecord(ctx context.Context, account, entityType, id string, rec *Change) (e Entity, removed bool, err error) {
	err = s.update(ctx, func(tx *txw) error {
		e, removed = Entity{}, false
		if tx.b(bucketMeta).Get(purgeKey(account)) != nil {
			return fmt.Errorf("%w: %s", ErrPurging, account)
		}
		before, err := tx.loadEntity(account, entityType, id)
		if err != nil {
			return err
		}
		if rec != nil {
			if rec.EntityType != entityType || rec.EntityID != id {
				return fmt.Errorf("%w: the record read is %s/%s, not %s/%s", ErrInvalidWrite, rec.EntityType, rec.EntityID, entityType, id)
			}
			var res PageResult
			if err := tx.applyChange(account, rec, false, true, &res); err != nil {
				return err
			}
		} else if err := tx.recordGone(account, entityType, id); err != nil {
			return err
		}
		ent, err := tx.loadEntity(account, entityType, id)
		if err != nil {
			return err
		}
		if ent == nil && before == nil {
			// Neither here nor live on the server.
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		if ent == nil {
			removed = true
			e = Entity{AccountID: account, Type: entityType, ID: id, SyncState: SyncSynced}
			return nil
		}
		if rec == nil || ent.SyncState != SyncStale || ent.SyncCode != StaleRefreshNeeded {
			// Read: out of the refresh set, whatever it found.
			if err := tx.markRefresh(ent, false); err != nil {
				return err
			}
		}
		e = *ent
		return nil
	})
	return e, removed, err
}

// recordGone settles an entity whose record the server no longer holds.
func (tx *txw) recordGone(account, entityType, id string) error {
	e, err := tx.loadEntity(account, entityType, id)
	if err != nil || e == nil || e.ServerID == "" {
		return err // never on the server as far as this device knows
	}
	if err := tx.markRefresh(e, false); err != nil {
		return err
	}
	head, err := tx.partitionHead(account, entityType, id)
	if err != nil {
		return err
	}
	if head == nil {
		if err := tx.deleteEntity(account, entityType, id); err != nil {
			return err
		}
		e.SyncState = SyncSynced
		return tx.remoteEvent(e, EventEntityRemoved)
	}
	if srv := e.gone(e.knownID()); e.newer(srv) {
		e.setServer(srv)
		return tx.reconcile(e, true)
	}
	return nil
}
