// Package boltstore is the embedded idempotency.Store: records in two
// buckets of a bbolt file the caller opens and owns, next to the caller's
// own buckets.
//
// A gated request runs in one bbolt write transaction: reservation,
// domain write and completion commit together or not at all, so a crash
// leaves no processing record behind. bbolt has one writer at a time,
// which makes the whole gate serial per file; a duplicate of a request in
// flight waits for it (or gets 409 after idempotency.Config.InFlightWait)
// and then replays its answer. The handler finds the *bolt.Tx with
// TxFromContext.
//
// Buckets: "idempotency_records" maps uvarint(len(actor)) | actor | key
// to the JSON record; "idempotency_expiry" maps 8-byte big-endian expiry
// (Unix nanoseconds) | record key to nothing, so Sweep reads expired
// records in order without a scan.
package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/syncd/syncd/idempotency"
	bolt "go.etcd.io/bbolt"
)

var (
	bucketRecords = []byte("idempotency_records")
	bucketExpiry  = []byte("idempotency_expiry")
)

// sweepBatch is how many records one Sweep write transaction deletes, so
// a large sweep never holds the writer lock for long.
const sweepBatch = 1000

// ErrNoDB is returned by New when db is nil.
var ErrNoDB = errors.New("boltstore: no database")

// Store is an idempotency.Store on a bbolt database.
type Store struct {
	db *bolt.DB
}

var _ idempotency.Store = (*Store)(nil)

// New creates the store's buckets in db if needed. The caller keeps
// owning db and closes it after the last request.
func New(db *bolt.DB) (*Store, error) {
	if db == nil {
		return nil, ErrNoDB
	}
	err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRecords, bucketExpiry} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("boltstore: create bucket %s: %w", b, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Store{db: db}, nil
}

// DB returns the database the store works on.
func (s *Store) DB() *bolt.DB { return s.db }

// Begin opens a bbolt write transaction. It blocks while another write
// transaction is open on the file.
func (s *Store) Begin(ctx context.Context) (idempotency.Tx, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return nil, fmt.Errorf("boltstore: begin: %w", err)
	}
	return &Tx{tx: tx}, nil
}

// Get returns the record for (actor, key), or nil. For tests and tools.
func (s *Store) Get(ctx context.Context, actor, key string) (*idempotency.Record, error) {
	var rec *idempotency.Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get(recordKey(actor, key))
		if v == nil {
			return nil
		}
		var err error
		rec, err = decode(v)
		return err
	})
	return rec, err
}

// Sweep deletes records that expired at or before now, in batches of
// sweepBatch per write transaction.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n := 0
		err := s.db.Update(func(tx *bolt.Tx) error {
			exp, recs := tx.Bucket(bucketExpiry), tx.Bucket(bucketRecords)
			limit := timeKey(now)
			var keys [][]byte
			c := exp.Cursor()
			for k, _ := c.First(); k != nil && len(keys) < sweepBatch; k, _ = c.Next() {
				if len(k) < 8 || bytes.Compare(k[:8], limit) > 0 {
					break
				}
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := exp.Delete(k); err != nil {
					return err
				}
				rk := k[8:]
				if v := recs.Get(rk); v != nil {
					rec, err := decode(v)
					if err != nil {
						return err
					}
					// Only the record this index entry was written for.
					if rec.Expired(now) {
						if err := recs.Delete(rk); err != nil {
							return err
						}
					}
				}
			}
			n = len(keys)
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("boltstore: sweep: %w", err)
		}
		total += n
		if n < sweepBatch {
			return total, nil
		}
	}
}

// BeginGroup implements idempotency.GroupStore: one bbolt write
// transaction (so one commit, one fsync) for the gated requests of a
// batch. bbolt has no savepoints, so a member that rolls back after
// writing breaks the group: idempotency.BatchHandler then rolls it back
// and runs the members before it again, in a new group, as bbolt's own
// DB.Batch does with a failing function.
func (s *Store) BeginGroup(ctx context.Context) (idempotency.TxGroup, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return nil, fmt.Errorf("boltstore: begin group: %w", err)
	}
	return &Group{tx: tx}, nil
}

// Group is a group transaction: one bbolt write transaction its members
// share.
type Group struct {
	tx     *bolt.Tx
	broken bool
	done   bool
}

var _ idempotency.GroupStore = (*Store)(nil)

// Begin implements idempotency.TxGroup.
func (g *Group) Begin(ctx context.Context) (idempotency.Tx, error) {
	switch {
	case g.done:
		return nil, idempotency.ErrTxDone
	case g.Broken():
		return nil, idempotency.ErrGroupBroken
	}
	return &Tx{tx: g.tx, group: g}, nil
}

// Broken implements idempotency.TxGroup: a member rolled back after it
// wrote, or a handler ended the shared transaction.
func (g *Group) Broken() bool { return g.broken || (!g.done && g.tx.DB() == nil) }

// Commit implements idempotency.TxGroup.
func (g *Group) Commit(ctx context.Context) error {
	if g.done {
		return idempotency.ErrTxDone
	}
	if g.tx.DB() == nil {
		g.done = true
		return idempotency.ErrTxEnded
	}
	if g.broken {
		return idempotency.ErrGroupBroken
	}
	g.done = true
	if err := g.tx.Commit(); err != nil {
		return fmt.Errorf("boltstore: commit group: %w", err)
	}
	return nil
}

// Rollback implements idempotency.TxGroup.
func (g *Group) Rollback(ctx context.Context) error {
	if g.done || g.tx.DB() == nil {
		g.done = true
		return nil
	}
	g.done = true
	return g.tx.Rollback()
}

// Tx is the transaction of one gated request: a bbolt write transaction
// of its own, or a member of a Group's.
type Tx struct {
	tx       *bolt.Tx
	group    *Group // nil for a transaction of its own
	reserved []byte
	wrote    bool // Reserve wrote: a member's rollback breaks its group
	done     bool
}

// TxFromContext returns the bbolt write transaction of the gated request
// whose context ctx is; ok is false outside one or for another store.
// The handler writes through it and must not commit or roll it back (nor
// call OnCommit): the gate commits it with the stored answer. bbolt
// gives no way to hand out a write transaction without its Commit; if a
// handler commits it anyway, the gate answers 500 instead of storing,
// and the key stays held, processing, until the gate's processing lease
// ends.
func TxFromContext(ctx context.Context) (tx *bolt.Tx, ok bool) {
	t, ok := idempotency.TxFromContext(ctx).(*Tx)
	if !ok || t.done || t.ended() {
		return nil, false
	}
	return t.tx, true
}

// ended reports whether the bbolt transaction was closed behind the
// gate's back (bbolt clears a closed transaction's DB).
func (t *Tx) ended() bool { return t.tx.DB() == nil }

// Reserve implements idempotency.Tx.
func (t *Tx) Reserve(ctx context.Context, rec *idempotency.Record, now time.Time) (*idempotency.Record, error) {
	if t.done {
		return nil, idempotency.ErrTxDone
	}
	if t.ended() {
		return nil, idempotency.ErrTxEnded
	}
	recs, exp := t.tx.Bucket(bucketRecords), t.tx.Bucket(bucketExpiry)
	rk := recordKey(rec.Actor, rec.Key)
	if v := recs.Get(rk); v != nil {
		old, err := decode(v)
		if err != nil {
			return nil, err
		}
		if !old.Expired(now) {
			return old, nil
		}
		t.wrote = true
		if err := exp.Delete(expiryKey(old.ExpiresAt, rk)); err != nil {
			return nil, fmt.Errorf("boltstore: reserve: %w", err)
		}
	}
	t.wrote = true
	if err := put(recs, rk, rec); err != nil {
		return nil, err
	}
	if err := exp.Put(expiryKey(rec.ExpiresAt, rk), nil); err != nil {
		return nil, fmt.Errorf("boltstore: reserve: %w", err)
	}
	t.reserved = rk
	return nil, nil
}

// Complete implements idempotency.Tx. It moves the record's entry in
// the expiry index from the end of its lease to the end of its
// retention.
func (t *Tx) Complete(ctx context.Context, rec *idempotency.Record) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if t.ended() {
		return idempotency.ErrTxEnded
	}
	rk := recordKey(rec.Actor, rec.Key)
	if !bytes.Equal(rk, t.reserved) {
		return idempotency.ErrNotReserved
	}
	recs, exp := t.tx.Bucket(bucketRecords), t.tx.Bucket(bucketExpiry)
	v := recs.Get(rk)
	if v == nil {
		return idempotency.ErrNotReserved
	}
	old, err := decode(v)
	if err != nil {
		return err
	}
	if !old.ExpiresAt.Equal(rec.ExpiresAt) {
		if err := exp.Delete(expiryKey(old.ExpiresAt, rk)); err != nil {
			return fmt.Errorf("boltstore: complete: %w", err)
		}
		if err := exp.Put(expiryKey(rec.ExpiresAt, rk), nil); err != nil {
			return fmt.Errorf("boltstore: complete: %w", err)
		}
	}
	return put(recs, rk, rec)
}

// Commit implements idempotency.Tx. A member's commit keeps its writes
// in the group, which commits them.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if t.ended() {
		t.done = true
		return idempotency.ErrTxEnded
	}
	t.done = true
	if t.group != nil {
		return nil
	}
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("boltstore: commit: %w", err)
	}
	return nil
}

// Rollback implements idempotency.Tx. A member cannot take its writes
// back alone: if it wrote, its group is broken (TxGroup.Broken).
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done || t.ended() {
		t.done = true
		return nil
	}
	t.done = true
	if t.group != nil {
		if t.wrote {
			t.group.broken = true
		}
		return nil
	}
	return t.tx.Rollback()
}

// stored is the JSON form of a record in the bucket.
type stored struct {
	Actor          string              `json:"actor"`
	Key            string              `json:"key"`
	Operation      string              `json:"operation"`
	Fingerprint    string              `json:"fingerprint"`
	Status         idempotency.Status  `json:"status"`
	ResponseStatus int                 `json:"responseStatus,omitempty"`
	ResponseHeader map[string][]string `json:"responseHeader,omitempty"`
	ResponseBody   []byte              `json:"responseBody,omitempty"`
	CreatedAt      int64               `json:"createdAt"`
	CompletedAt    int64               `json:"completedAt,omitempty"`
	ExpiresAt      int64               `json:"expiresAt"`
}

func put(b *bolt.Bucket, rk []byte, rec *idempotency.Record) error {
	s := stored{
		Actor: rec.Actor, Key: rec.Key, Operation: rec.Operation,
		Fingerprint: rec.Fingerprint, Status: rec.Status,
		ResponseStatus: rec.ResponseStatus, ResponseHeader: rec.ResponseHeader, ResponseBody: rec.ResponseBody,
		CreatedAt: rec.CreatedAt.UnixNano(), ExpiresAt: rec.ExpiresAt.UnixNano(),
	}
	if !rec.CompletedAt.IsZero() {
		s.CompletedAt = rec.CompletedAt.UnixNano()
	}
	v, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("boltstore: encode record: %w", err)
	}
	if err := b.Put(rk, v); err != nil {
		return fmt.Errorf("boltstore: put record: %w", err)
	}
	return nil
}

// decode copies a record out of bbolt's memory.
func decode(v []byte) (*idempotency.Record, error) {
	var s stored
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, fmt.Errorf("boltstore: decode record: %w", err)
	}
	rec := &idempotency.Record{
		Actor: s.Actor, Key: s.Key, Operation: s.Operation,
		Fingerprint: s.Fingerprint, Status: s.Status,
		ResponseStatus: s.ResponseStatus, ResponseHeader: http.Header(s.ResponseHeader), ResponseBody: s.ResponseBody,
		CreatedAt: time.Unix(0, s.CreatedAt), ExpiresAt: time.Unix(0, s.ExpiresAt),
	}
	if s.CompletedAt != 0 {
		rec.CompletedAt = time.Unix(0, s.CompletedAt)
	}
	return rec, nil
}

func recordKey(actor, key string) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 2+len(actor)+len(key)), uint64(len(actor)))
	b = append(b, actor...)
	return append(b, key...)
}

func timeKey(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano()))
}

func expiryKey(t time.Time, rk []byte) []byte {
	return append(timeKey(t), rk...)
}
