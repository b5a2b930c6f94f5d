package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/idempotency/boltstore"
	bolt "go.etcd.io/bbolt"
)

// entityStore keeps the server's entities. Writes run in the gated
// request's store transaction, found in ctx; reads open their own.
type entityStore interface {
	// create inserts e unless (actor, e.Type, e.ClientID) exists. If that
	// entity is live, it returns it and writes nothing. If it is deleted,
	// it brings it back: the entity keeps its id and takes e's data,
	// payloadVersion and times, no longer deleted; e.ID is set to its id
	// and existing is nil. The lookup and the write are one transaction,
	// so of two racing creates only one inserts or brings back.
	create(ctx context.Context, actor string, e *Entity) (existing *Entity, err error)
	// update runs fn on the entity and saves it when fn returns true; it
	// returns the entity as it is afterwards, or ErrNotFound.
	update(ctx context.Context, actor, typ, id string, fn func(*Entity) bool) (*Entity, error)
	get(ctx context.Context, actor, typ, id string) (*Entity, error)
	// list returns the entity with clientID, or with clientID "" up to
	// limit entities of the type.
	list(ctx context.Context, actor, typ, clientID string, limit int) ([]Entity, error)
	// Changes serves the changes feed (changefeed.Source): positions are
	// the actor's write sequence, in commit order.
	changefeed.Source
	// sweepTombstones deletes deleted records older than before and
	// raises their actors' horizons.
	sweepTombstones(ctx context.Context, before time.Time) (int, error)
	// versions returns the kept versions of the record, newest first, at
	// most limit; ErrNotFound when there is no such record.
	versions(ctx context.Context, actor, typ, id string, limit int) ([]Version, error)
	// version returns the record id's kept version v, in the write
	// transaction of ctx; ok is false when it is not kept.
	version(ctx context.Context, id string, v int64) (Version, bool, error)
	// sweepHistory deletes the kept versions made before before, but
	// each record's current one.
	sweepHistory(ctx context.Context, before time.Time) (int, error)
	close() error
}

// bbolt layout, in the same file as boltstore's buckets:
//
//	remote_entities:   id -> JSON boltEntity
//	remote_client_ids: uvarint-length-prefixed actor | type, then clientId -> id
//	remote_seq:        actor -> 8-byte big-endian: the actor's last feed position
//	remote_changes:    uvarint-length-prefixed actor | 8-byte position -> id
//	remote_horizon:    actor -> 8-byte position: tombstones at or below it were swept
//	remote_versions:   id | 0x00 | 8-byte version -> JSON Version: the record's history
//
// bbolt runs one write transaction at a time, so positions grow in
// commit order.
var (
	bucketEntities  = []byte("remote_entities")
	bucketClientIDs = []byte("remote_client_ids")
	bucketSeq       = []byte("remote_seq")
	bucketChanges   = []byte("remote_changes")
	bucketHorizon   = []byte("remote_horizon")
	bucketVersions  = []byte("remote_versions")
)

// boltEntity is an Entity as stored, with its actor and feed position.
type boltEntity struct {
	Entity
	Actor string `json:"actor"`
	Seq   int64  `json:"seq,omitempty"`
	// Since and Paths are Entity.since and Entity.paths.
	Since int64            `json:"since,omitempty"`
	Paths map[string]int64 `json:"paths,omitempty"`
}

type boltEntities struct {
	db       *bolt.DB
	ownDB    bool
	notifier *changefeed.Notifier
	history  int // versions kept per record (Config.HistoryVersions)
}

func newBoltEntities(db *bolt.DB, own bool, n *changefeed.Notifier, history int) (*boltEntities, error) {
	s := &boltEntities{db: db, ownDB: own, notifier: n, history: history}
	err := db.Update(func(tx *bolt.Tx) error {
		feedless := tx.Bucket(bucketSeq) == nil
		for _, b := range [][]byte{bucketEntities, bucketClientIDs, bucketSeq, bucketChanges, bucketHorizon, bucketVersions} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if !feedless {
			return nil
		}
		// A file from before the changes feed: its records get their
		// feed positions (and version 1) once.
		var old []*boltEntity
		err := tx.Bucket(bucketEntities).ForEach(func(k, v []byte) error {
			var e boltEntity
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("remote: decode entity %s: %w", k, err)
			}
			old = append(old, &e)
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range old {
			e.Version = max(e.Version, 1)
			if err := s.written(tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remote: create buckets: %w", err)
	}
	return s, nil
}

func actorPrefix(actor string) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(actor))), actor...)
}

func changeKey(actor string, seq int64) []byte {
	return binary.BigEndian.AppendUint64(actorPrefix(actor), uint64(seq))
}

func getU64(b *bolt.Bucket, k []byte) int64 {
	if v := b.Get(k); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// written gives e the actor's next feed position, moves its entry in the
// changes index there, and wakes the actor's long polls once the
// transaction commits. Every write of an entity goes through it.
func (s *boltEntities) written(tx *bolt.Tx, e *boltEntity) error {
	seqs, changes := tx.Bucket(bucketSeq), tx.Bucket(bucketChanges)
	if e.Seq > 0 {
		if err := changes.Delete(changeKey(e.Actor, e.Seq)); err != nil {
			return err
		}
	}
	next := getU64(seqs, []byte(e.Actor)) + 1
	if err := seqs.Put([]byte(e.Actor), binary.BigEndian.AppendUint64(nil, uint64(next))); err != nil {
		return err
	}
	e.Seq, e.seq = next, next
	if err := changes.Put(changeKey(e.Actor, next), []byte(e.ID)); err != nil {
		return err
	}
	if err := putEntity(tx, e); err != nil {
		return err
	}
	if err := s.keepVersion(tx, e); err != nil {
		return err
	}
	actor := e.Actor
	tx.OnCommit(func() { s.notifier.Notify(actor) })
	return nil
}

// Changes implements changefeed.Source: one View transaction reads the
// actor's head, horizon and rows.
func (s *boltEntities) Changes(ctx context.Context, actor string, after int64, limit int) (changefeed.Read, error) {
	var r changefeed.Read
	err := s.db.View(func(tx *bolt.Tx) error {
		r.Head = getU64(tx.Bucket(bucketSeq), []byte(actor))
		r.Horizon = getU64(tx.Bucket(bucketHorizon), []byte(actor))
		prefix := actorPrefix(actor)
		c := tx.Bucket(bucketChanges).Cursor()
		for k, id := c.Seek(changeKey(actor, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, id = c.Next() {
			if len(r.Changes) == limit {
				r.More = true
				break
			}
			v := tx.Bucket(bucketEntities).Get(id)
			if v == nil {
				return fmt.Errorf("remote: changes: entity %s of the index is missing", id)
			}
			var e boltEntity
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("remote: decode entity %s: %w", id, err)
			}
			r.Changes = append(r.Changes, e.change())
			r.Positions = append(r.Positions, int64(binary.BigEndian.Uint64(k[len(prefix):])))
		}
		return nil
	})
	if err != nil {
		return changefeed.Read{}, err
	}
	return r, nil
}

// sweepTombstones deletes tombstones deleted before before, a thousand
// per write transaction, raising each actor's horizon to the position of
// the tombstones it lost.
func (s *boltEntities) sweepTombstones(ctx context.Context, before time.Time) (int, error) {
	total := 0
	var after []byte // the id walk's position
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, done := 0, false
		err := s.db.Update(func(tx *bolt.Tx) error {
			ents := tx.Bucket(bucketEntities)
			c := ents.Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(after)
				if k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			var gone []*boltEntity
			scanned := 0
			for ; k != nil && scanned < 10000 && len(gone) < 1000; k, v = c.Next() {
				scanned++
				after = bytes.Clone(k)
				var e boltEntity
				if err := json.Unmarshal(v, &e); err != nil {
					return fmt.Errorf("remote: decode entity %s: %w", k, err)
				}
				if e.Deleted && e.DeletedAt != nil && e.DeletedAt.Before(before) {
					gone = append(gone, &e)
				}
			}
			done = k == nil
			for _, e := range gone {
				if err := ents.Delete([]byte(e.ID)); err != nil {
					return err
				}
				if err := tx.Bucket(bucketClientIDs).Delete(append(scopePrefix(e.Actor, e.Type), e.ClientID...)); err != nil {
					return err
				}
				if err := dropVersions(tx, e.ID, 0); err != nil {
					return err
				}
				if e.Seq > 0 {
					if err := tx.Bucket(bucketChanges).Delete(changeKey(e.Actor, e.Seq)); err != nil {
						return err
					}
				}
				hz := tx.Bucket(bucketHorizon)
				if e.Seq > getU64(hz, []byte(e.Actor)) {
					if err := hz.Put([]byte(e.Actor), binary.BigEndian.AppendUint64(nil, uint64(e.Seq))); err != nil {
						return err
					}
				}
			}
			n = len(gone)
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("remote: sweep tombstones: %w", err)
		}
		total += n
		if done {
			return total, nil
		}
	}
}

func scopePrefix(actor, typ string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(actor)))
	b = append(b, actor...)
	b = binary.AppendUvarint(b, uint64(len(typ)))
	return append(b, typ...)
}

func writeTx(ctx context.Context) (*bolt.Tx, error) {
	tx, ok := boltstore.TxFromContext(ctx)
	if !ok {
		return nil, errNoTx
	}
	return tx, nil
}

func readEntity(tx *bolt.Tx, actor, typ, id string) (*boltEntity, error) {
	v := tx.Bucket(bucketEntities).Get([]byte(id))
	if v == nil {
		return nil, ErrNotFound
	}
	var e boltEntity
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, fmt.Errorf("remote: decode entity %s: %w", id, err)
	}
	if e.Actor != actor || e.Type != typ {
		return nil, ErrNotFound
	}
	e.since, e.paths = e.Since, e.Paths
	return &e, nil
}

func putEntity(tx *bolt.Tx, e *boltEntity) error {
	e.Since, e.Paths = e.since, e.paths
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketEntities).Put([]byte(e.ID), v)
}

func (s *boltEntities) create(ctx context.Context, actor string, e *Entity) (*Entity, error) {
	tx, err := writeTx(ctx)
	if err != nil {
		return nil, err
	}
	ck := append(scopePrefix(actor, e.Type), e.ClientID...)
	idx := tx.Bucket(bucketClientIDs)
	if id := idx.Get(ck); id != nil {
		old, err := readEntity(tx, actor, e.Type, string(id))
		if err != nil {
			return nil, err
		}
		if !old.Deleted {
			return &old.Entity, nil
		}
		e.ID = old.ID // bring it back; the clientId index already points here
		e.Version = old.Version + 1
		e.replaced()
		be := &boltEntity{Entity: *e, Actor: actor, Seq: old.Seq}
		if err := s.written(tx, be); err != nil {
			return nil, fmt.Errorf("remote: create: bring back %s: %w", e.ID, err)
		}
		e.seq = be.Seq
		return nil, nil
	}
	e.Version = 1
	e.replaced()
	be := &boltEntity{Entity: *e, Actor: actor}
	if err := s.written(tx, be); err != nil {
		return nil, fmt.Errorf("remote: create: %w", err)
	}
	e.seq = be.Seq
	if err := idx.Put(ck, []byte(e.ID)); err != nil {
		return nil, fmt.Errorf("remote: create: %w", err)
	}
	return nil, nil
}

func (s *boltEntities) update(ctx context.Context, actor, typ, id string, fn func(*Entity) bool) (*Entity, error) {
	tx, err := writeTx(ctx)
	if err != nil {
		return nil, err
	}
	e, err := readEntity(tx, actor, typ, id)
	if err != nil {
		return nil, err
	}
	if fn(&e.Entity) {
		if err := s.written(tx, e); err != nil {
			return nil, fmt.Errorf("remote: update: %w", err)
		}
	}
	return &e.Entity, nil
}

func (s *boltEntities) get(ctx context.Context, actor, typ, id string) (*Entity, error) {
	var out *Entity
	err := s.db.View(func(tx *bolt.Tx) error {
		e, err := readEntity(tx, actor, typ, id)
		if err == nil {
			out = &e.Entity
		}
		return err
	})
	return out, err
}

func (s *boltEntities) list(ctx context.Context, actor, typ, clientID string, limit int) ([]Entity, error) {
	var out []Entity
	err := s.db.View(func(tx *bolt.Tx) error {
		prefix := scopePrefix(actor, typ)
		idx := tx.Bucket(bucketClientIDs)
		if clientID != "" {
			if id := idx.Get(append(prefix, clientID...)); id != nil {
				e, err := readEntity(tx, actor, typ, string(id))
				if err != nil {
					return err
				}
				out = append(out, e.Entity)
			}
			return nil
		}
		c := idx.Cursor()
		for k, id := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, id = c.Next() {
			e, err := readEntity(tx, actor, typ, string(id))
			if err != nil {
				return err
			}
			out = append(out, e.Entity)
		}
		return nil
	})
	return out, err
}

func versionKey(id string, v int64) []byte {
	k := append([]byte(id), 0)
	return binary.BigEndian.AppendUint64(k, uint64(v))
}

// keepVersion adds e's version to its history, and drops the versions
// past the s.history newest.
func (s *boltEntities) keepVersion(tx *bolt.Tx, e *boltEntity) error {
	if s.history < 0 {
		return nil
	}
	v, err := json.Marshal(e.historyEntry())
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketVersions).Put(versionKey(e.ID, e.Version), v); err != nil {
		return err
	}
	return dropVersions(tx, e.ID, max(e.Version-int64(max(s.history, 1))+1, 1)) // keep 1 drops nothing; 0 would drop all
}

// dropVersions deletes the kept versions of id below keep (all: 0).
func dropVersions(tx *bolt.Tx, id string, keep int64) error {
	c := tx.Bucket(bucketVersions).Cursor()
	prefix := append([]byte(id), 0)
	var gone [][]byte
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if keep > 0 && int64(binary.BigEndian.Uint64(k[len(prefix):])) >= keep {
			break
		}
		gone = append(gone, bytes.Clone(k))
	}
	for _, k := range gone {
		if err := tx.Bucket(bucketVersions).Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func (s *boltEntities) versions(ctx context.Context, actor, typ, id string, limit int) ([]Version, error) {
	var out []Version
	err := s.db.View(func(tx *bolt.Tx) error {
		if _, err := readEntity(tx, actor, typ, id); err != nil {
			return err
		}
		prefix := append([]byte(id), 0)
		c := tx.Bucket(bucketVersions).Cursor()
		k, v := c.Seek(versionKey(id, math.MaxInt64))
		if k == nil || !bytes.HasPrefix(k, prefix) {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, v = c.Prev() {
			var h Version
			if err := json.Unmarshal(v, &h); err != nil {
				return fmt.Errorf("remote: decode version %x: %w", k, err)
			}
			out = append(out, h)
		}
		return nil
	})
	return out, err
}

func (s *boltEntities) version(ctx context.Context, id string, v int64) (Version, bool, error) {
	tx, err := writeTx(ctx)
	if err != nil {
		return Version{}, false, err
	}
	raw := tx.Bucket(bucketVersions).Get(versionKey(id, v))
	if raw == nil {
		return Version{}, false, nil
	}
	var h Version
	if err := json.Unmarshal(raw, &h); err != nil {
		return Version{}, false, fmt.Errorf("remote: decode version %d of %s: %w", v, id, err)
	}
	return h, true, nil
}

// sweepHistory walks the versions, a thousand deletions per write
// transaction, keeping each record's current one.
func (s *boltEntities) sweepHistory(ctx context.Context, before time.Time) (int, error) {
	total := 0
	var after []byte
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, done := 0, false
		err := s.db.Update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketVersions).Cursor()
			k, v := c.First()
			if after != nil {
				if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
					k, v = c.Next()
				}
			}
			var gone [][]byte
			for scanned := 0; k != nil && scanned < 10000 && len(gone) < 1000; k, v = c.Next() {
				scanned++
				after = bytes.Clone(k)
				var h Version
				if err := json.Unmarshal(v, &h); err != nil {
					return fmt.Errorf("remote: decode version %x: %w", k, err)
				}
				if !h.UpdatedAt.Before(before) || len(k) < 9 {
					continue
				}
				// The record's current version stays.
				if raw := tx.Bucket(bucketEntities).Get(k[:len(k)-9]); raw != nil {
					var e boltEntity
					if err := json.Unmarshal(raw, &e); err != nil {
						return fmt.Errorf("remote: decode entity %s: %w", k[:len(k)-9], err)
					}
					if e.Version == h.Version {
						continue
					}
				}
				gone = append(gone, bytes.Clone(k))
			}
			done = k == nil
			for _, k := range gone {
				if err := tx.Bucket(bucketVersions).Delete(k); err != nil {
					return err
				}
			}
			n = len(gone)
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("remote: sweep versions: %w", err)
		}
		total += n
		if done {
			return total, nil
		}
	}
}

func (s *boltEntities) close() error {
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// openBolt opens (creating) the server's bbolt file. It gives up after a
// second when another process holds the file.
func openBolt(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("remote: open %s: %w", path, err)
	}
	return db, nil
}
