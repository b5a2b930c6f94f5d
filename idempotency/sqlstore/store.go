// Package sqlstore is the idempotency.Store on PostgreSQL through
// database/sql, for backends whose domain code is written against
// database/sql: sqlc, GORM, ent, bun or plain *sql.DB. It reads and
// writes the same tables as pgstore (one schema, shared SQL), so a
// backend may use either store, or both, on one database.
//
// A gated request runs in one *sql.Tx at READ COMMITTED: the
// reservation (a transaction-scoped advisory lock on the key, taken
// without waiting, and the processing record), the handler's domain
// writes and the completion commit together or not at all. A duplicate
// of a request in flight on any replica gets 409 at once. The handler
// writes through TxFromContext, which gives the transaction without its
// Commit and Rollback.
//
// Any PostgreSQL driver for database/sql works (pgx's stdlib, lib/pq).
// database/sql cannot pipeline, so a gated request costs more round
// trips than with pgstore: BEGIN, the transaction's limits, the
// reservation, its transaction id, the gate's savepoint (the handler runs
// after it, so that a final refusal after a failed statement is still
// stored), the completion's check, the completion and COMMIT each go on
// their own, eight against pgstore's two, after the gate's read of the
// record (Store.Get), which pgstore does in its reservation. (sqlstore
// could read there too, but without pipelining a replay would then cost
// a transaction of four round trips instead of one read.) It does not
// group a batch's operations into one transaction
// (idempotency.GroupStore): each commits on its own.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
)

// Defaults for the zero values of Config.
const (
	// DefaultLockTimeout is how long a statement of a gated transaction
	// waits for a row lock held by another transaction.
	DefaultLockTimeout = 2 * time.Second
	// DefaultLease is how long a gated transaction may sit idle before
	// PostgreSQL ends its session and rolls it back.
	DefaultLease = time.Minute
)

// ErrNoDB is returned by New when Config.DB is nil.
var ErrNoDB = errors.New("sqlstore: no database")

// Config configures a Store. DB is required.
type Config struct {
	DB          *sql.DB
	LockTimeout time.Duration // DefaultLockTimeout
	Lease       time.Duration // DefaultLease
	// Migrate, if set, runs the application's own schema migrations in
	// New, in the transaction that migrates the library's tables and
	// under the same advisory lock, after them: replicas that start
	// together run it one after another, never at once. Every New runs
	// it, so it must be safe to run again (IF NOT EXISTS, or a version
	// table of its own). An error rolls back the library's migration too,
	// and New returns it.
	Migrate func(ctx context.Context, tx *sql.Tx) error
}

// Store is an idempotency.Store on a *sql.DB connected to PostgreSQL.
type Store struct {
	db          *sql.DB
	lockTimeout string
	lease       string
	retention   pgsql.Retention // sweep_after's guess at a reservation
}

var (
	_ idempotency.Store       = (*Store)(nil)
	_ idempotency.SavepointTx = (*Tx)(nil)
)

// New migrates the schema (the same as pgstore's) and returns the store.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, ErrNoDB
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if err := migrate(ctx, cfg.DB, cfg.Migrate); err != nil {
		return nil, err
	}
	return &Store{
		db:          cfg.DB,
		lockTimeout: strconv.FormatInt(max(cfg.LockTimeout.Milliseconds(), 1), 10) + "ms",
		lease:       strconv.FormatInt(max(cfg.Lease.Milliseconds(), 1), 10) + "ms",
	}, nil
}

// migrate brings the library's tables up to date and then runs app, the
// application's own migrations (Config.Migrate), in one transaction
// under one advisory lock.
func migrate(ctx context.Context, db *sql.DB, app func(ctx context.Context, tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
			err = fmt.Errorf("sqlstore: migrate: %w", err)
		}
	}()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgsql.MigrationLock)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, pgsql.CreateSchemaTable); err != nil {
		return err
	}
	var version int
	switch err := tx.QueryRowContext(ctx, `SELECT version FROM idempotency_schema`).Scan(&version); {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency_schema (version) VALUES (0)`); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	for i := version; i < len(pgsql.Migrations); i++ {
		if _, err := tx.ExecContext(ctx, pgsql.Migrations[i]); err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if version < len(pgsql.Migrations) {
		if _, err := tx.ExecContext(ctx, `UPDATE idempotency_schema SET version = $1`, len(pgsql.Migrations)); err != nil {
			return err
		}
	}
	if app != nil {
		if err := app(ctx, tx); err != nil {
			return fmt.Errorf("the application's migration: %w", err)
		}
	}
	return tx.Commit()
}

// DB returns the database the store works on.
func (s *Store) DB() *sql.DB { return s.db }

// Begin starts the request's transaction at READ COMMITTED with its lock
// timeout and lease.
func (s *Store) Begin(ctx context.Context) (idempotency.Tx, error) {
	// database/sql rolls a transaction back when the context it began
	// with ends: a client that went away after its handler answered
	// would lose the answer half-way through the commit. The gate ends
	// the transaction itself (Commit or Rollback, always); each
	// statement still takes the request's context.
	tx, err := s.db.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("sqlstore: begin: %w", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)",
		s.lockTimeout, s.lease); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("sqlstore: begin: %w", err)
	}
	return &Tx{store: s, tx: tx}, nil
}

// Get returns the committed record for (actor, key), or nil. For tests
// and tools.
func (s *Store) Get(ctx context.Context, actor, key string) (*idempotency.Record, error) {
	return getRecord(ctx, s.db, actor, key)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getRecord(ctx context.Context, q queryRower, actor, key string) (*idempotency.Record, error) {
	rec := &idempotency.Record{Actor: actor, Key: key}
	var (
		status      string
		respStatus  sql.NullInt32
		respHeaders []byte
		completedAt sql.NullTime
	)
	err := q.QueryRowContext(ctx, pgsql.SelectRecord, actor, key).Scan(&rec.Operation, &rec.Fingerprint, &status,
		&respStatus, &respHeaders, &rec.ResponseBody, &rec.CreatedAt, &completedAt, &rec.ExpiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: read record: %w", err)
	}
	rec.Status = idempotency.Status(status)
	rec.ResponseStatus = int(respStatus.Int32)
	if len(respHeaders) > 0 {
		if err := json.Unmarshal(respHeaders, &rec.ResponseHeader); err != nil {
			return nil, fmt.Errorf("sqlstore: decode response headers: %w", err)
		}
	}
	if completedAt.Valid {
		rec.CompletedAt = completedAt.Time
	}
	return rec, nil
}

// Sweep deletes records that expired at or before now, pgsql.SweepBatch
// rows per statement, walking the sweep_after index from where the
// previous statement ended; rows a running request holds are skipped.
// As with pgstore, a completed record goes at the first sweep at or
// after its expiry, and a record left processing (committed without its
// answer) one retention after its creation, though its key is free when
// its processing lease ends.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	from := time.Time{}
	for {
		var (
			n    int
			last sql.NullTime
		)
		if err := s.db.QueryRowContext(ctx, pgsql.Sweep, now, from, pgsql.SweepBatch).Scan(&n, &last); err != nil {
			return total, fmt.Errorf("sqlstore: sweep: %w", err)
		}
		total += n
		if n < pgsql.SweepBatch || !last.Valid {
			return total, nil
		}
		from = last.Time
	}
}

// Tx is the transaction of one gated request.
type Tx struct {
	store    *Store
	tx       *sql.Tx
	actor    string
	key      string
	xid      int64 // the transaction's id, read at the reservation
	reserved bool
	done     bool
}

// DBTX is what a gated handler writes through: the request's *sql.Tx
// without Commit and Rollback. It is the interface sqlc generates
// (db.New(tx)), GORM's ConnPool, and ent's ExecQuerier.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// handlerTx hides the *sql.Tx behind DBTX.
type handlerTx struct{ tx *sql.Tx }

func (h handlerTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return h.tx.ExecContext(ctx, query, args...)
}

func (h handlerTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return h.tx.PrepareContext(ctx, query)
}

func (h handlerTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return h.tx.QueryContext(ctx, query, args...)
}

func (h handlerTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return h.tx.QueryRowContext(ctx, query, args...)
}

// TxFromContext returns the transaction of the gated request whose
// context ctx is; ok is false outside one or for another store. The gate
// commits it with the stored answer or rolls it back. A handler that
// ends it anyway (ExecContext("COMMIT")) gets a 500 from the gate
// instead of a stored answer.
func TxFromContext(ctx context.Context) (tx DBTX, ok bool) {
	t, ok := idempotency.TxFromContext(ctx).(*Tx)
	if !ok || t.done {
		return nil, false
	}
	return handlerTx{t.tx}, true
}

// Reserve implements idempotency.Tx. When another transaction holds the
// key's lock it returns the completed record if there is one, else
// idempotency.ErrInFlight, at once.
func (t *Tx) Reserve(ctx context.Context, rec *idempotency.Record, now time.Time) (*idempotency.Record, error) {
	if t.done {
		return nil, idempotency.ErrTxDone
	}
	if t.reserved {
		return nil, errors.New("sqlstore: reserve: this transaction already holds a reservation")
	}
	args := []any{rec.Actor, rec.Key, rec.Operation, rec.Fingerprint, rec.CreatedAt, rec.ExpiresAt,
		t.store.retention.SweepAfter(rec.CreatedAt)}
	for range 3 {
		var (
			got      bool
			inserted int
		)
		if err := t.tx.QueryRowContext(ctx, pgsql.Reserve, args...).Scan(&got, &inserted); err != nil {
			return nil, classify("reserve", err)
		}
		if !got {
			// The lock is taken: by a request in flight, or by one that
			// is only finding the key completed. One read tells them
			// apart; a completed key never answers 409.
			old, err := getRecord(ctx, t.tx, rec.Actor, rec.Key)
			if err != nil {
				return nil, err
			}
			if old != nil && !old.Expired(now) && old.Status == idempotency.StatusCompleted {
				return old, nil
			}
			return nil, idempotency.ErrInFlight
		}
		if inserted == 1 {
			// The id the completion checks, so that it fails if the
			// handler ended this transaction and the statement would run
			// in another.
			if err := t.tx.QueryRowContext(ctx, `SELECT txid_current()`).Scan(&t.xid); err != nil {
				return nil, classify("reserve", err)
			}
			t.actor, t.key, t.reserved = rec.Actor, rec.Key, true
			return nil, nil
		}
		old, err := getRecord(ctx, t.tx, rec.Actor, rec.Key)
		if err != nil {
			return nil, err
		}
		if old != nil && !old.Expired(now) {
			return old, nil
		}
		if old != nil {
			if _, err := t.tx.ExecContext(ctx, pgsql.DeleteExpired, rec.Actor, rec.Key, now); err != nil {
				return nil, classify("reserve", err)
			}
		}
	}
	return nil, errors.New("sqlstore: reserve: record keeps changing under the reservation")
}

// Complete implements idempotency.Tx: it completes the record in the
// request's transaction, and fails with idempotency.ErrTxEnded if that
// transaction is no longer the one that reserved it.
func (t *Tx) Complete(ctx context.Context, rec *idempotency.Record) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if !t.reserved || rec.Actor != t.actor || rec.Key != t.key {
		return idempotency.ErrNotReserved
	}
	var xid sql.NullInt64
	if err := t.tx.QueryRowContext(ctx, `SELECT txid_current_if_assigned()`).Scan(&xid); err != nil {
		return endError("complete", err)
	}
	if !xid.Valid || xid.Int64 != t.xid {
		return idempotency.ErrTxEnded
	}
	hdr, err := json.Marshal(http.Header(rec.ResponseHeader))
	if err != nil {
		return fmt.Errorf("sqlstore: encode response headers: %w", err)
	}
	body := rec.ResponseBody
	if body == nil {
		body = []byte{}
	}
	t.store.retention.Learn(rec.CreatedAt, rec.ExpiresAt)
	var one int
	if err := t.tx.QueryRowContext(ctx, pgsql.Complete,
		rec.Actor, rec.Key, rec.ResponseStatus, hdr, body, rec.CompletedAt, rec.ExpiresAt).Scan(&one); err != nil {
		return endError("complete", err)
	}
	return nil
}

// Savepoint implements idempotency.SavepointTx: the gate's savepoint
// after the reservation (one round trip; database/sql cannot pipeline
// it).
func (t *Tx) Savepoint(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT "+savepointGate); err != nil {
		return fmt.Errorf("sqlstore: savepoint: %w", err)
	}
	return nil
}

// RollbackToSavepoint implements idempotency.SavepointTx.
func (t *Tx) RollbackToSavepoint(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if _, err := t.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+savepointGate); err != nil {
		return fmt.Errorf("sqlstore: rollback to savepoint: %w", err)
	}
	return nil
}

// savepointGate is the name of the gate's savepoint (pgstore's too).
const savepointGate = "idempotency_gate"

// Commit implements idempotency.Tx.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	t.done = true
	if err := t.tx.Commit(); err != nil {
		return endError("commit", err)
	}
	return nil
}

// endError wraps an error of completing or committing: with
// idempotency.ErrTxAborted when PostgreSQL answered with an error that
// rolls the transaction back or says it is aborted (25P02), which the
// driver reports with its SQLSTATE; as it is otherwise (a lost
// connection: the outcome is unknown). Class 08 (connection exception)
// and 57 (operator intervention: a terminated backend) say nothing
// about the outcome.
func endError(op string, err error) error {
	var s sqlState
	if errors.As(err, &s) {
		if c := s.SQLState(); len(c) == 5 && c[:2] != "08" && c[:2] != "57" {
			return fmt.Errorf("sqlstore: %s: %w: %w", op, idempotency.ErrTxAborted, err)
		}
	}
	return fmt.Errorf("sqlstore: %s: %w", op, err)
}

// Rollback implements idempotency.Tx.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlstore: rollback: %w", err)
	}
	return nil
}

// sqlState is implemented by the errors of pgx's stdlib and lib/pq.
type sqlState interface{ SQLState() string }

// classify maps lock_not_available (a row lock the lock timeout gave up
// on) to idempotency.ErrInFlight.
func classify(op string, err error) error {
	var s sqlState
	if errors.As(err, &s) && s.SQLState() == "55P03" {
		return idempotency.ErrInFlight
	}
	return fmt.Errorf("sqlstore: %s: %w", op, err)
}
