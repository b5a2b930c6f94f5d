package remote

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

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
	close() error
}

// bbolt layout, in the same file as boltstore's buckets:
//
//	remote_entities:   id -> JSON boltEntity
//	remote_client_ids: uvarint-length-prefixed actor | type, then clientId -> id
var (
	bucketEntities  = []byte("remote_entities")
	bucketClientIDs = []byte("remote_client_ids")
)

// boltEntity is an Entity as stored, with its actor.
type boltEntity struct {
	Entity
	Actor string `json:"actor"`
}

type boltEntities struct {
	db    *bolt.DB
	ownDB bool
}

func newBoltEntities(db *bolt.DB, own bool) (*boltEntities, error) {
	err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketEntities, bucketClientIDs} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("remote: create buckets: %w", err)
	}
	return &boltEntities{db: db, ownDB: own}, nil
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
	return &e, nil
}

func putEntity(tx *bolt.Tx, e *boltEntity) error {
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
		if err := putEntity(tx, &boltEntity{Entity: *e, Actor: actor}); err != nil {
			return nil, fmt.Errorf("remote: create: bring back %s: %w", e.ID, err)
		}
		return nil, nil
	}
	if err := putEntity(tx, &boltEntity{Entity: *e, Actor: actor}); err != nil {
		return nil, fmt.Errorf("remote: create: %w", err)
	}
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
		if err := putEntity(tx, e); err != nil {
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
