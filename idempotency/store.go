package idempotency

import (
	"context"
	"net/http"
	"time"
)

// Status is the state of an idempotency record.
type Status string

const (
	// StatusProcessing marks a reserved key whose request has not finished.
	// The stores in this module never commit a processing record (the
	// reservation, the domain write and the completion share one
	// transaction). Its ExpiresAt is the end of its lease
	// (Config.ProcessingLease), so one committed anyway (by a Store that
	// commits reservations early, or a handler that breaks the rules)
	// frees its key when the lease ends.
	StatusProcessing Status = "processing"
	// StatusCompleted marks a key whose response is stored for replay.
	StatusCompleted Status = "completed"
)

// Record is one idempotency record: the reservation of (Actor, Key) and,
// once completed, the response to replay.
type Record struct {
	Actor       string
	Key         string
	Operation   string // the operation type, e.g. "create"
	Fingerprint string // hex SHA-256, see Fingerprint
	Status      Status

	ResponseStatus int
	ResponseHeader http.Header // the headers the handler set, minus Set-Cookie
	ResponseBody   []byte

	CreatedAt   time.Time
	CompletedAt time.Time // zero while processing
	// ExpiresAt is the end of the processing lease while processing, and
	// of the retention once completed. At it, the record counts as absent.
	ExpiresAt time.Time
}

// Expired reports whether the record is past its expiry at now.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// Store keeps idempotency records. A Store hands out one transaction per
// gated request; the handler's domain writes go into that same
// transaction, so the response is recorded exactly when the effect
// commits. Implementations: boltstore (embedded, one process) and pgstore
// (PostgreSQL, many server replicas). idempotencytest holds the
// conformance suite every Store must pass.
type Store interface {
	// Begin starts the transaction for one gated request.
	Begin(ctx context.Context) (Tx, error)
	// Get returns the committed record for (actor, key), or nil, with
	// one read and no lock (it must not wait for a transaction that
	// holds the key). The gate answers a completed key from it before it
	// reserves (unless the store is a ReadingStore), and again before it
	// answers 409, so resends of a finished request never queue behind
	// each other.
	Get(ctx context.Context, actor, key string) (*Record, error)
	// Sweep deletes the records that expired at or before now and returns
	// how many it deleted.
	Sweep(ctx context.Context, now time.Time) (int, error)
}

// ReadingStore is a Store whose Tx.Reserve answers a finished key
// without Get's help: in the round trip that reserves, without waiting
// for a lock, it reads the committed record and returns it when the key
// is taken (its own reservation, or another transaction's lock, when the
// record is completed and live), and it answers ErrInFlight only when
// there is no such record. When ReserveReads reports true the gate does
// not call Get before it reserves: a fresh request saves that read; a
// replay costs a store transaction that reserves nothing instead. (A
// duplicate that meets the key held in this process, or ErrInFlight,
// still reads with Get, so a completed key never answers 409.) pgstore
// implements it, with the read pipelined with its BEGIN.
type ReadingStore interface {
	Store
	ReserveReads() bool
}

// Tx is a store transaction scoped to one gated request. It is used from
// the request's goroutine only.
type Tx interface {
	// Reserve claims (rec.Actor, rec.Key) by writing rec (status
	// processing) unless a live record for the pair exists. It returns nil
	// when the claim is new, or a copy of the existing record. A record
	// that expired at or before now counts as absent and is replaced.
	// When another transaction holds the claim and does not finish in
	// time, Reserve returns ErrInFlight.
	Reserve(ctx context.Context, rec *Record, now time.Time) (existing *Record, err error)
	// Complete stores the response for a claim made by Reserve in this
	// transaction; rec carries the response fields, CompletedAt and the
	// new ExpiresAt (the end of the retention). It returns ErrTxEnded if
	// the transaction was ended behind the store's back.
	Complete(ctx context.Context, rec *Record) error
	// Commit commits the reservation, the handler's domain writes and
	// the completion together. It returns ErrTxEnded, and commits
	// nothing, if the transaction was ended behind the store's back.
	Commit(ctx context.Context) error
	// Rollback discards everything the transaction wrote. It is safe to
	// call after Commit (it then does nothing).
	Rollback(ctx context.Context) error
}

type txKey struct{}

// ContextWithTx returns a context carrying tx. The Gate does this for the
// handler it runs; call it yourself only to run a gated handler's domain
// code outside the gate (as the benchmarks do to measure the gate).
func ContextWithTx(ctx context.Context, tx Tx) context.Context {
	return context.WithValue(ctx, txKey{}, tx)
}

// TxFromContext returns the request's store transaction, or nil outside a
// gated request. Stores offer typed accessors on top of it:
// boltstore.TxFromContext returns the *bolt.Tx, pgstore.TxFromContext the
// pgx.Tx.
func TxFromContext(ctx context.Context) Tx {
	tx, _ := ctx.Value(txKey{}).(Tx)
	return tx
}

// SavepointTx is a Tx that can go back to a point after its reservation.
// The gate marks that point right after a new reservation, before the
// handler runs, so that a handler whose statement failed (PostgreSQL then
// aborts the transaction: SQLSTATE 25P02 for every later statement) can
// still have its final refusal stored: the gate rolls back to the
// savepoint, which discards the handler's writes and ends the aborted
// state, and completes the record. pgstore and sqlstore implement it;
// bbolt transactions are never aborted by a failed write.
type SavepointTx interface {
	Tx
	// Savepoint marks the transaction's present state, replacing an
	// earlier mark.
	Savepoint(ctx context.Context) error
	// RollbackToSavepoint discards what was written since Savepoint and
	// makes an aborted transaction usable again.
	RollbackToSavepoint(ctx context.Context) error
}

// GroupStore is a Store that can run several gated requests in one
// transaction, each in a member transaction nested in it, so that they
// commit together: one fsync (bbolt) or one COMMIT (PostgreSQL) for all.
// BatchHandler uses it (BatchConfig.Store) for the operations of a batch;
// each keeps its own record, fingerprint, replay and answer, and a member
// rolled back takes only its own writes with it. boltstore and pgstore
// implement it.
type GroupStore interface {
	Store
	// BeginGroup starts a group transaction.
	BeginGroup(ctx context.Context) (TxGroup, error)
}

// TxGroup is a group transaction. Its members run one after another, on
// the goroutine that owns the group.
type TxGroup interface {
	// Begin starts a member transaction. Its Commit keeps the member's
	// reservation, writes and completion in the group, to commit with it;
	// its Rollback discards only the member's writes, or, on a store
	// without savepoints, marks the group Broken.
	Begin(ctx context.Context) (Tx, error)
	// Broken reports that the group can only be rolled back: a member
	// rolled back writes the store cannot discard alone (bbolt has no
	// savepoints), or the group's connection failed. The members that
	// committed in it must run again, in a new group.
	Broken() bool
	// Commit commits the members that committed. It returns an error
	// wrapping ErrTxAborted when the store is sure nothing committed.
	Commit(ctx context.Context) error
	// Rollback discards the whole group. It is safe to call after Commit
	// (it then does nothing).
	Rollback(ctx context.Context) error
}
