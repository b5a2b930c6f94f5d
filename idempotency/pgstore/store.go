// Package pgstore is the idempotency.Store on PostgreSQL, for servers
// with several replicas sharing one database. It uses a *pgxpool.Pool the
// caller opens and owns; the handler gets the request's pgx.Tx with
// TxFromContext and does its domain writes in it.
//
// One transaction per gated request holds the reservation
// (INSERT ... ON CONFLICT (actor_id, operation_id) DO NOTHING), the
// handler's domain write and the completion (UPDATE to completed with the
// response). Until it commits, the processing row is invisible to other
// transactions, and a duplicate's INSERT blocks on the primary key: when
// the first commits, the duplicate replays its answer; when it rolls back
// (handler error, crash, lost connection), the duplicate takes the key
// and runs. A duplicate that waits longer than Config.LockTimeout gets
// idempotency.ErrInFlight (409 with Retry-After).
//
// The gate costs no extra round trip: BEGIN is pipelined with the
// reservation, and the completion with the COMMIT, so a gated request
// with one domain write makes three round trips, like a plain
// transaction. It costs a row insert and update per request.
//
// No record can stay in processing: a crashed server's connection drops
// and PostgreSQL rolls its transaction back; a server that hangs inside
// a request is cut off after Config.Lease by
// idle_in_transaction_session_timeout, which is the server lease.
//
// The tables live in the connection's search_path (add
// search_path=NAME to the DSN to use another schema) and are created or
// migrated by New under an advisory lock, so replicas may start together.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
)

// Defaults for the zero values of Config.
const (
	// DefaultLockTimeout is how long a duplicate waits for the request
	// holding its key before it answers 409 (and how long any statement
	// of a gated transaction waits for a row lock).
	DefaultLockTimeout = 2 * time.Second
	// DefaultLease is how long a gated transaction may sit idle (the
	// server doing non-database work, or hung) before PostgreSQL ends
	// its session and rolls it back.
	DefaultLease = time.Minute
)

const sweepBatch = 1000

// Errors.
var (
	// ErrNoPool is returned by New when Config.Pool is nil.
	ErrNoPool = errors.New("pgstore: no connection pool")
)

// Config configures a Store. Pool is required.
type Config struct {
	Pool        *pgxpool.Pool
	LockTimeout time.Duration // DefaultLockTimeout
	Lease       time.Duration // DefaultLease
}

// Store is an idempotency.Store on PostgreSQL.
type Store struct {
	pool        *pgxpool.Pool
	beginSQL    string // BEGIN and the SET LOCALs, as one simple query
	lockTimeout string // the SET LOCAL values, for the pipelined begin
	lease       string
}

var _ idempotency.Store = (*Store)(nil)

// New migrates the schema and returns the store.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Pool == nil {
		return nil, ErrNoPool
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if err := migrate(ctx, cfg.Pool); err != nil {
		return nil, err
	}
	lock := strconv.FormatInt(max(cfg.LockTimeout.Milliseconds(), 1), 10) + "ms"
	lease := strconv.FormatInt(max(cfg.Lease.Milliseconds(), 1), 10) + "ms"
	begin := "BEGIN ISOLATION LEVEL READ COMMITTED; " +
		"SET LOCAL lock_timeout = '" + lock + "'; " +
		"SET LOCAL idle_in_transaction_session_timeout = '" + lease + "'"
	return &Store{pool: cfg.Pool, beginSQL: begin, lockTimeout: lock, lease: lease}, nil
}

// Pool returns the pool the store works on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Begin takes a connection from the pool. The transaction itself starts
// with the reservation (Tx.Reserve), or with the first TxFromContext when
// a handler runs without one.
func (s *Store) Begin(ctx context.Context) (idempotency.Tx, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	return &Tx{store: s, pc: pc, conn: pc.Conn()}, nil
}

const selectRecord = `SELECT operation_type, request_fingerprint, status, response_status,
	response_headers, response_body, created_at, completed_at, expires_at
FROM idempotency_records WHERE actor_id = $1 AND operation_id = $2`

// Get returns the committed record for (actor, key), or nil. For tests
// and tools.
func (s *Store) Get(ctx context.Context, actor, key string) (*idempotency.Record, error) {
	return getRecord(ctx, s.pool, actor, key)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getRecord(ctx context.Context, q querier, actor, key string) (*idempotency.Record, error) {
	rec := &idempotency.Record{Actor: actor, Key: key}
	var (
		status      string
		respStatus  *int32
		respHeaders []byte
		completedAt *time.Time
	)
	err := q.QueryRow(ctx, selectRecord, actor, key).Scan(&rec.Operation, &rec.Fingerprint, &status,
		&respStatus, &respHeaders, &rec.ResponseBody, &rec.CreatedAt, &completedAt, &rec.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read record: %w", err)
	}
	rec.Status = idempotency.Status(status)
	if respStatus != nil {
		rec.ResponseStatus = int(*respStatus)
	}
	if len(respHeaders) > 0 {
		if err := json.Unmarshal(respHeaders, &rec.ResponseHeader); err != nil {
			return nil, fmt.Errorf("pgstore: decode response headers: %w", err)
		}
	}
	if completedAt != nil {
		rec.CompletedAt = *completedAt
	}
	return rec, nil
}

// Sweep deletes records that expired at or before now, sweepBatch rows
// per statement; rows locked by a running request are skipped.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_records WHERE (actor_id, operation_id) IN (
			SELECT actor_id, operation_id FROM idempotency_records
			WHERE expires_at <= $1 LIMIT `+strconv.Itoa(sweepBatch)+` FOR UPDATE SKIP LOCKED)`, now)
		if err != nil {
			return total, fmt.Errorf("pgstore: sweep: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < sweepBatch {
			return total, nil
		}
	}
}

// Tx is the transaction of one gated request, on one pooled connection.
// It costs as many round trips as a plain transaction with the same
// domain writes (BEGIN, the writes, COMMIT): Reserve pipelines BEGIN, the
// transaction's limits and the reserving INSERT; Commit pipelines the
// completing UPDATE and the COMMIT.
type Tx struct {
	store    *Store
	pc       *pgxpool.Conn // released by Commit or Rollback
	conn     *pgx.Conn
	begun    bool
	err      error // a failed lazy begin, reported by Commit
	actor    string
	key      string
	reserved bool
	complete *idempotency.Record // sent with the COMMIT
	done     bool
}

// TxFromContext returns the pgx transaction of the gated request whose
// context ctx is; ok is false outside one or for another store. Do not
// commit or roll it back (its Commit and Rollback return
// ErrTxOwnedByGate): the gate does, together with the stored response.
// Its Begin makes savepoints; LargeObjects is not supported.
func TxFromContext(ctx context.Context) (tx pgx.Tx, ok bool) {
	t, ok := idempotency.TxFromContext(ctx).(*Tx)
	if !ok || t.done {
		return nil, false
	}
	if !t.begun {
		// A handler outside Reserve (e.g. run ungated): a plain BEGIN.
		if _, err := t.conn.Exec(ctx, t.store.beginSQL); err != nil {
			t.err = err
			return nil, false
		}
		t.begun = true
	}
	return &handlerTx{conn: t.conn}, true
}

const reserveSQL = `INSERT INTO idempotency_records
	(actor_id, operation_id, operation_type, request_fingerprint, status, created_at, expires_at)
	VALUES ($1, $2, $3, $4, 'processing', $5, $6)
	ON CONFLICT (actor_id, operation_id) DO NOTHING`

// Reserve implements idempotency.Tx: INSERT ... ON CONFLICT
// (actor_id, operation_id) DO NOTHING, pipelined with BEGIN. On a
// conflict it reads the committed row (READ COMMITTED: a new statement
// sees what the conflicting transaction committed); an expired row is
// deleted and the insert tried again, in the same transaction.
func (t *Tx) Reserve(ctx context.Context, rec *idempotency.Record, now time.Time) (*idempotency.Record, error) {
	if t.done {
		return nil, idempotency.ErrTxDone
	}
	if t.reserved {
		return nil, fmt.Errorf("pgstore: reserve: this transaction already holds a reservation")
	}
	args := []any{rec.Actor, rec.Key, rec.Operation, rec.Fingerprint, rec.CreatedAt, rec.ExpiresAt}
	var tag pgconn.CommandTag
	if !t.begun {
		b := &pgx.Batch{}
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		b.Queue("SELECT set_config('lock_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)",
			t.store.lockTimeout, t.store.lease)
		b.Queue(reserveSQL, args...)
		br := t.conn.SendBatch(ctx, b)
		_, err1 := br.Exec()
		_, err2 := br.Exec()
		var err3 error
		tag, err3 = br.Exec()
		errClose := br.Close()
		t.begun = t.conn.PgConn().TxStatus() != 'I'
		if err := errors.Join(err1, err2, err3, errClose); err != nil {
			return nil, classify("reserve", err)
		}
	} else {
		var err error
		if tag, err = t.conn.Exec(ctx, reserveSQL, args...); err != nil {
			return nil, classify("reserve", err)
		}
	}
	for range 3 {
		if tag.RowsAffected() == 1 {
			t.actor, t.key, t.reserved = rec.Actor, rec.Key, true
			return nil, nil
		}
		old, err := getRecord(ctx, t.conn, rec.Actor, rec.Key)
		if err != nil {
			return nil, classify("reserve", err)
		}
		if old != nil && !old.Expired(now) {
			return old, nil
		}
		if old != nil { // expired: delete it, then insert
			if _, err := t.conn.Exec(ctx, `DELETE FROM idempotency_records
				WHERE actor_id = $1 AND operation_id = $2 AND expires_at <= $3`, rec.Actor, rec.Key, now); err != nil {
				return nil, classify("reserve", err)
			}
		}
		if tag, err = t.conn.Exec(ctx, reserveSQL, args...); err != nil {
			return nil, classify("reserve", err)
		}
	}
	return nil, fmt.Errorf("pgstore: reserve: record keeps changing under the reservation")
}

// Complete implements idempotency.Tx. The UPDATE to completed is sent
// with the COMMIT; it fails the commit if the reservation is not there.
func (t *Tx) Complete(ctx context.Context, rec *idempotency.Record) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if !t.reserved || rec.Actor != t.actor || rec.Key != t.key {
		return idempotency.ErrNotReserved
	}
	c := *rec
	t.complete = &c
	return nil
}

// Commit implements idempotency.Tx: the completion and COMMIT in one
// round trip.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	t.done = true
	defer t.release(ctx)
	if t.err != nil {
		return fmt.Errorf("pgstore: commit: the transaction did not begin: %w", t.err)
	}
	if !t.begun {
		return nil // nothing began, nothing to commit
	}
	b := &pgx.Batch{}
	if rec := t.complete; rec != nil {
		hdr, err := json.Marshal(http.Header(rec.ResponseHeader))
		if err != nil {
			return fmt.Errorf("pgstore: encode response headers: %w", err)
		}
		body := rec.ResponseBody
		if body == nil {
			body = []byte{}
		}
		// 1/count(*) fails the pipeline, and so skips the COMMIT, unless
		// exactly the reserved row was completed.
		b.Queue(`WITH u AS (UPDATE idempotency_records
			SET status = 'completed', response_status = $3, response_headers = $4, response_body = $5, completed_at = $6
			WHERE actor_id = $1 AND operation_id = $2 AND status = 'processing' RETURNING 1)
			SELECT 1/count(*) FROM u`,
			rec.Actor, rec.Key, rec.ResponseStatus, hdr, body, rec.CompletedAt)
	}
	b.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, b)
	var errs []error
	var tag pgconn.CommandTag
	for range b.Len() {
		var err error
		tag, err = br.Exec()
		errs = append(errs, err)
	}
	errs = append(errs, br.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	if tag.String() == "ROLLBACK" {
		return fmt.Errorf("pgstore: commit: %w", pgx.ErrTxCommitRollback)
	}
	return nil
}

// Rollback implements idempotency.Tx.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	t.release(ctx)
	return nil
}

// release ends whatever transaction is still open on the connection and
// gives the connection back to the pool (which destroys it if it is
// still not idle).
func (t *Tx) release(ctx context.Context) {
	if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() != 'I' {
		_, _ = t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	t.pc.Release()
}

// classify maps lock_not_available (the lock timeout expired while
// another transaction holds the key) to idempotency.ErrInFlight.
func classify(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return idempotency.ErrInFlight
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}
