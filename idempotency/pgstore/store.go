// Package pgstore is the idempotency.Store on PostgreSQL, for servers
// with several replicas sharing one database. It uses a *pgxpool.Pool the
// caller opens and owns; the handler gets the request's pgx.Tx with
// TxFromContext and does its domain writes in it.
//
// One transaction per gated request holds the reservation (a
// transaction-scoped advisory lock on the key, taken without waiting,
// and INSERT ... ON CONFLICT (actor_id, operation_id) DO NOTHING, in one
// statement that also reads the committed record), the handler's domain
// write and the completion (UPDATE to completed with the response). Until it commits, the processing row is invisible to
// other transactions, and a duplicate on any replica finds the advisory
// lock taken and gets idempotency.ErrInFlight (409 with Retry-After) at
// once, holding its pooled connection for that one round trip. When the
// first commits, a retry replays its answer; when it rolls back (handler
// error, crash, lost connection), a retry takes the key and runs.
//
// The gate costs no extra round trip: BEGIN is pipelined with the
// reservation (which sets the transaction's limits too) and the
// savepoint the handler runs after (so that a final refusal after a
// failed statement is still stored), and the completion with the
// COMMIT, so a gated request with one domain write makes three round
// trips, like a plain transaction. Since the reservation reads the
// record, the gate does not read it first (the Store is an
// idempotency.ReadingStore): a replay costs the reservation's round
// trip, which finds the completed record, and a ROLLBACK. The gate
// costs a row insert and update per request. The update is HOT (it
// changes no indexed column, so it writes no index entries): the
// sweep's index is on sweep_after, which the reservation sets to the
// expiry the completion will give, guessing the gate's retention from
// the last completion (pgsql.Retention).
//
// A batch (idempotency.BatchHandler with this Store) runs its operations
// in one transaction, a Group: each between a savepoint, sent with its
// reservation, and the savepoint's release, sent with its completion, so
// an operation rolled back takes only its own writes, and one COMMIT
// ends them all. The group holds its operations' keys (their advisory
// locks) and the rows they locked until that COMMIT. An operation that
// writes uses two subtransactions (its savepoint and the gate's), and
// past 64 in one transaction (a batch of more than 32 creates)
// PostgreSQL's per-backend cache of them overflows: while the group
// runs (about 0.1 s for 100 creates), other sessions' visibility checks
// on its rows look in pg_subtrans. That cost on other sessions is not
// measured here.
//
// No record can stay in processing: a crashed server's connection drops
// and PostgreSQL rolls its transaction back; a server that hangs inside
// a request is cut off after Config.Lease by
// idle_in_transaction_session_timeout, which is the server lease.
//
// The tables live in the connection's search_path (add
// search_path=NAME to the DSN to use another schema) and are created or
// migrated by New under an advisory lock, so replicas may start together;
// Config.Migrate runs the application's migrations under the same lock.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
)

// Defaults for the zero values of Config.
const (
	// DefaultLockTimeout is how long a statement of a gated transaction
	// waits for a row lock held by another transaction. (A duplicate of a
	// request in flight does not wait: it answers 409 at once.)
	DefaultLockTimeout = 2 * time.Second
	// DefaultLease is how long a gated transaction may sit idle (the
	// server doing non-database work, or hung) before PostgreSQL ends
	// its session and rolls it back.
	DefaultLease = time.Minute
)

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
	// Migrate, if set, runs the application's own schema migrations in
	// New, in the transaction that migrates the library's tables and
	// under the same advisory lock, after them: replicas that start
	// together run it one after another, never at once (CREATE TABLE IF
	// NOT EXISTS run concurrently can fail with a unique violation on
	// pg_type). Every New runs it, so it must be safe to run again:
	// IF NOT EXISTS statements, or a version table of its own. An error
	// rolls back the library's migration too, and New returns it.
	Migrate func(ctx context.Context, tx pgx.Tx) error
}

// Store is an idempotency.Store on PostgreSQL.
type Store struct {
	pool        *pgxpool.Pool
	beginSQL    string // BEGIN and the SET LOCALs, as one simple query
	lockTimeout string // the SET LOCAL values, for the pipelined begin
	lease       string
	retention   pgsql.Retention // sweep_after's guess at a reservation
}

var (
	_ idempotency.Store        = (*Store)(nil)
	_ idempotency.ReadingStore = (*Store)(nil)
	_ idempotency.SavepointTx  = (*Tx)(nil)
)

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
	if err := migrate(ctx, cfg.Pool, cfg.Migrate); err != nil {
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

// Get returns the committed record for (actor, key), or nil. For tests
// and tools.
func (s *Store) Get(ctx context.Context, actor, key string) (*idempotency.Record, error) {
	return getRecord(ctx, s.pool, actor, key)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getRecord(ctx context.Context, q querier, actor, key string) (*idempotency.Record, error) {
	var c recordColumns
	err := q.QueryRow(ctx, pgsql.SelectRecord, actor, key).Scan(c.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read record: %w", err)
	}
	return c.record(actor, key)
}

// recordColumns receives the columns of pgsql.SelectRecord, which are
// NULL where ReserveRead found no record.
type recordColumns struct {
	operation, fingerprint, status *string
	respStatus                     *int32
	respHeaders, respBody          []byte
	createdAt, completedAt         *time.Time
	expiresAt                      *time.Time
}

func (c *recordColumns) dest() []any {
	return []any{&c.operation, &c.fingerprint, &c.status, &c.respStatus, &c.respHeaders, &c.respBody,
		&c.createdAt, &c.completedAt, &c.expiresAt}
}

// record returns the record the columns hold, or nil if they are NULL.
func (c *recordColumns) record(actor, key string) (*idempotency.Record, error) {
	if c.status == nil {
		return nil, nil
	}
	rec := &idempotency.Record{Actor: actor, Key: key, Operation: *c.operation, Fingerprint: *c.fingerprint,
		Status: idempotency.Status(*c.status), ResponseBody: c.respBody, CreatedAt: *c.createdAt, ExpiresAt: *c.expiresAt}
	if c.respStatus != nil {
		rec.ResponseStatus = int(*c.respStatus)
	}
	if len(c.respHeaders) > 0 {
		if err := json.Unmarshal(c.respHeaders, &rec.ResponseHeader); err != nil {
			return nil, fmt.Errorf("pgstore: decode response headers: %w", err)
		}
	}
	if c.completedAt != nil {
		rec.CompletedAt = *c.completedAt
	}
	return rec, nil
}

// Sweep deletes records that expired at or before now, pgsql.SweepBatch
// rows per statement; rows locked by a running request are skipped. It
// walks the sweep_after index from the last sweep_after it deleted (a
// keyset), so each statement starts where the previous one ended
// instead of walking again over the index entries of rows it already
// deleted, which stay until vacuum can remove them (long, behind any
// open transaction). A completed record's sweep_after is its expiry, so
// it is deleted by the first sweep at or after its expiry, as before
// migration 2. A record left processing (a handler that committed the
// gate's transaction itself) has the sweep_after its completion would
// have had, one retention after its creation: its key is free when its
// processing lease ends (the next reservation of the key deletes it),
// but the sweep deletes it only then.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	from := time.Time{} // before every expiry
	for {
		var (
			n    int
			last *time.Time
		)
		err := s.pool.QueryRow(ctx, pgsql.Sweep, now, from, pgsql.SweepBatch).Scan(&n, &last)
		if err != nil {
			return total, fmt.Errorf("pgstore: sweep: %w", err)
		}
		total += n
		if n < pgsql.SweepBatch || last == nil {
			return total, nil
		}
		from = *last
	}
}

// Savepoint names. The gate's is taken after a new reservation (the
// handler runs after it); a group member's before its reservation.
const (
	savepointGate = "idempotency_gate"
	savepointItem = "idempotency_item"
)

// Tx is the transaction of one gated request, on one pooled connection.
// It costs as many round trips as a plain transaction with the same
// domain writes (BEGIN, the writes, COMMIT): Reserve pipelines BEGIN, the
// transaction's limits, the reserving INSERT and the gate's savepoint;
// Commit pipelines the completing UPDATE and the COMMIT. A member of a
// Group pipelines its own savepoint with its reservation instead of
// BEGIN, and the release of that savepoint with its completion.
type Tx struct {
	store    *Store
	pc       *pgxpool.Conn // released by Commit or Rollback; nil for a member
	conn     *pgx.Conn
	group    *Group // nil for a transaction of its own
	begun    bool
	err      error // a failed lazy begin, reported by Commit
	actor    string
	key      string
	reserved bool
	itemSP   bool                // a member's savepoint was sent
	gateSP   bool                // the gate's savepoint directly follows the reservation
	complete *idempotency.Record // sent with the COMMIT
	done     bool
}

// TxFromContext returns the pgx transaction of the gated request whose
// context ctx is; ok is false outside one or for another store. Do not
// commit or roll it back (its Commit and Rollback return
// ErrTxOwnedByGate): the gate does, together with the stored response.
// Its Begin makes savepoints; Conn returns nil, since the connection
// could end the transaction; LargeObjects is not supported. A handler
// that ends the transaction anyway (Exec("COMMIT")) gets a 500 from the
// gate instead of a stored answer.
func TxFromContext(ctx context.Context) (tx pgx.Tx, ok bool) {
	t, ok := idempotency.TxFromContext(ctx).(*Tx)
	if !ok || t.done {
		return nil, false
	}
	if !t.begun || (t.group != nil && !t.itemSP) {
		// A handler outside Reserve (e.g. run ungated): a plain BEGIN,
		// and a member's savepoint.
		sql := ""
		if !t.begun {
			sql = t.store.beginSQL + "; "
		}
		if t.group != nil {
			sql += "SAVEPOINT " + savepointItem
		}
		if _, err := t.conn.Exec(ctx, strings.TrimSuffix(sql, "; ")); err != nil {
			t.err = err
			return nil, false
		}
		t.setBegun()
		t.itemSP = t.group != nil
	}
	return &handlerTx{conn: t.conn}, true
}

// setBegun records whether the connection is in a transaction now.
func (t *Tx) setBegun() {
	t.begun = t.conn.PgConn().TxStatus() != 'I'
	if t.group != nil {
		t.group.begun = t.begun
	}
}

// Reserve implements idempotency.Tx, pipelined with BEGIN; its statement
// takes the lock, inserts and reads the committed record at once. When
// another transaction holds the key's lock it returns the completed
// record if there is one, else idempotency.ErrInFlight, at once. On a
// conflict with a committed record it returns that record (read again in
// a new statement if it committed after the first began: READ COMMITTED);
// an expired record is deleted and the insert tried again, in the same
// transaction.
func (t *Tx) Reserve(ctx context.Context, rec *idempotency.Record, now time.Time) (*idempotency.Record, error) {
	if t.done {
		return nil, idempotency.ErrTxDone
	}
	if t.reserved {
		return nil, fmt.Errorf("pgstore: reserve: this transaction already holds a reservation")
	}
	args := []any{rec.Actor, rec.Key, rec.Operation, rec.Fingerprint, rec.CreatedAt, rec.ExpiresAt,
		t.store.retention.SweepAfter(rec.CreatedAt)}
	var (
		got      bool
		inserted int
		cols     recordColumns
	)
	// One round trip: BEGIN and the limits (unless begun), a member's
	// savepoint, the reservation with the read of the record, and the
	// gate's savepoint after it.
	b := &pgx.Batch{}
	reserve, reserveArgs := pgsql.ReserveRead, args
	if !t.begun {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
		if t.group == nil {
			// The limits go with the reservation. (A member's must not:
			// they would end with its savepoint.)
			reserve, reserveArgs = pgsql.ReserveReadWithLimits, append(args[:len(args):len(args)], t.store.lockTimeout, t.store.lease)
		} else {
			b.Queue("SELECT set_config('lock_timeout', $1, true), set_config('idle_in_transaction_session_timeout', $2, true)",
				t.store.lockTimeout, t.store.lease)
		}
	}
	if t.group != nil && !t.itemSP {
		b.Queue("SAVEPOINT " + savepointItem)
		t.itemSP = true
	}
	pre := b.Len()
	b.Queue(reserve, reserveArgs...)
	b.Queue("SAVEPOINT " + savepointGate)
	br := t.conn.SendBatch(ctx, b)
	errs := make([]error, 0, pre+3)
	for range pre {
		_, err := br.Exec()
		errs = append(errs, err)
	}
	errs = append(errs, br.QueryRow().Scan(append([]any{&got, &inserted}, cols.dest()...)...))
	_, err := br.Exec()
	errs = append(errs, err, br.Close())
	t.setBegun()
	if err := errors.Join(errs...); err != nil {
		return nil, classify("reserve", err)
	}
	t.gateSP = got && inserted == 1
	for range 3 {
		if inserted == 1 {
			t.actor, t.key, t.reserved = rec.Actor, rec.Key, true
			return nil, nil
		}
		old, err := cols.record(rec.Actor, rec.Key)
		if err != nil {
			return nil, err
		}
		if !got {
			// The lock is taken: by a request in flight, or by one that
			// is only finding the key completed. The record read with
			// the lock tells them apart; a completed key never answers
			// 409.
			if old != nil && !old.Expired(now) && old.Status == idempotency.StatusCompleted {
				return old, nil
			}
			return nil, idempotency.ErrInFlight
		}
		if old == nil {
			// Committed after the statement began: a new statement sees
			// it.
			if old, err = getRecord(ctx, t.conn, rec.Actor, rec.Key); err != nil {
				return nil, classify("reserve", err)
			}
		}
		if old != nil && !old.Expired(now) {
			return old, nil
		}
		if old != nil { // expired: delete it, then insert
			if _, err := t.conn.Exec(ctx, pgsql.DeleteExpired, rec.Actor, rec.Key, now); err != nil {
				return nil, classify("reserve", err)
			}
		}
		cols = recordColumns{}
		if err := t.conn.QueryRow(ctx, pgsql.ReserveRead, args...).Scan(append([]any{&got, &inserted}, cols.dest()...)...); err != nil {
			return nil, classify("reserve", err)
		}
	}
	return nil, fmt.Errorf("pgstore: reserve: record keeps changing under the reservation")
}

// ReserveReads implements idempotency.ReadingStore: Reserve reads the
// record in the round trip that reserves, so the gate does not read it
// before (a fresh request saves a round trip and a pooled connection's
// turn; a replay costs the reservation's round trip and a ROLLBACK
// instead of one read).
func (s *Store) ReserveReads() bool { return true }

// Savepoint implements idempotency.SavepointTx. Right after a new
// reservation it costs nothing: Reserve sent the savepoint with it.
func (t *Tx) Savepoint(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if t.gateSP {
		t.gateSP = false
		return nil
	}
	if _, err := t.conn.Exec(ctx, "SAVEPOINT "+savepointGate); err != nil {
		return fmt.Errorf("pgstore: savepoint: %w", err)
	}
	return nil
}

// RollbackToSavepoint implements idempotency.SavepointTx.
func (t *Tx) RollbackToSavepoint(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	t.gateSP = false
	if _, err := t.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepointGate); err != nil {
		return fmt.Errorf("pgstore: rollback to savepoint: %w", err)
	}
	return nil
}

// Complete implements idempotency.Tx. The UPDATE to completed is sent
// with the COMMIT; it fails the commit if the reservation is not there.
// If a statement failed and the transaction is aborted, it returns
// idempotency.ErrTxAborted at once.
func (t *Tx) Complete(ctx context.Context, rec *idempotency.Record) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	if !t.reserved || rec.Actor != t.actor || rec.Key != t.key {
		return idempotency.ErrNotReserved
	}
	if t.conn.PgConn().TxStatus() == 'E' {
		return fmt.Errorf("pgstore: complete: %w", idempotency.ErrTxAborted)
	}
	c := *rec
	t.complete = &c
	return nil
}

// Commit implements idempotency.Tx: the completion and COMMIT in one
// round trip (a member: the completion and the release of its
// savepoint, the group commits).
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return idempotency.ErrTxDone
	}
	t.done = true
	if t.group != nil {
		err := t.commitMember(ctx)
		if err != nil {
			t.group.broken = true
		}
		return err
	}
	defer t.release(ctx)
	if t.err != nil {
		return fmt.Errorf("pgstore: commit: the transaction did not begin: %w", t.err)
	}
	if !t.begun {
		return nil // nothing began, nothing to commit
	}
	if t.conn.PgConn().TxStatus() == 'I' {
		// The handler sent COMMIT or ROLLBACK itself: the completion
		// would run outside the transaction.
		return idempotency.ErrTxEnded
	}
	b := &pgx.Batch{}
	if err := t.completion(b); err != nil {
		return err
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
		return commitError("commit", err)
	}
	if tag.String() == "ROLLBACK" {
		return fmt.Errorf("pgstore: commit: %w: %w", idempotency.ErrTxAborted, pgx.ErrTxCommitRollback)
	}
	return nil
}

// completion queues the completing UPDATE, if Complete was called.
func (t *Tx) completion(b *pgx.Batch) error {
	rec := t.complete
	if rec == nil {
		return nil
	}
	hdr, err := json.Marshal(http.Header(rec.ResponseHeader))
	if err != nil {
		return fmt.Errorf("pgstore: encode response headers: %w", err)
	}
	body := rec.ResponseBody
	if body == nil {
		body = []byte{}
	}
	t.store.retention.Learn(rec.CreatedAt, rec.ExpiresAt)
	// Fails the pipeline, and so skips what follows, unless exactly the
	// reserved row was completed.
	b.Queue(pgsql.Complete, rec.Actor, rec.Key, rec.ResponseStatus, hdr, body, rec.CompletedAt, rec.ExpiresAt)
	return nil
}

// commitMember completes a member and releases its savepoint, in one
// round trip: its writes stay in the group's transaction.
func (t *Tx) commitMember(ctx context.Context) error {
	if t.err != nil {
		return fmt.Errorf("pgstore: commit: the transaction did not begin: %w", t.err)
	}
	if !t.itemSP {
		return nil // nothing began
	}
	if t.conn.PgConn().TxStatus() == 'I' {
		return idempotency.ErrTxEnded
	}
	b := &pgx.Batch{}
	if err := t.completion(b); err != nil {
		return err
	}
	b.Queue("RELEASE SAVEPOINT " + savepointItem)
	br := t.conn.SendBatch(ctx, b)
	var errs []error
	for range b.Len() {
		_, err := br.Exec()
		errs = append(errs, err)
	}
	errs = append(errs, br.Close())
	if err := errors.Join(errs...); err != nil {
		return commitError("commit member", err)
	}
	return nil
}

// commitError wraps the error of a commit: with idempotency.ErrTxAborted
// when PostgreSQL answered it with an ERROR, which rolls back (a failed
// completion skips the COMMIT; a COMMIT that fails rolls back); as it is
// when the answer did not arrive (a lost connection), where the outcome
// is unknown.
func commitError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Severity == "ERROR" {
		return fmt.Errorf("pgstore: %s: %w: %w", op, idempotency.ErrTxAborted, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// Rollback implements idempotency.Tx. A member rolls back to its
// savepoint; if that fails, its group is broken.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if t.group != nil {
		if !t.itemSP {
			return nil
		}
		if t.conn.IsClosed() {
			t.group.broken = true
			return nil
		}
		_, err := t.conn.Exec(context.WithoutCancel(ctx),
			"ROLLBACK TO SAVEPOINT "+savepointItem+"; RELEASE SAVEPOINT "+savepointItem)
		if err != nil {
			t.group.broken = true
			return fmt.Errorf("pgstore: rollback member: %w", err)
		}
		return nil
	}
	t.release(ctx)
	return nil
}

// BeginGroup implements idempotency.GroupStore: one transaction on one
// pooled connection for the gated requests of a batch, each member
// between a savepoint (sent with its reservation) and its release (sent
// with its completion), so that a member rolled back takes only its own
// writes, and one COMMIT for all. The group holds its members'
// reservations (their advisory locks) and row locks until it ends.
func (s *Store) BeginGroup(ctx context.Context) (idempotency.TxGroup, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: begin group: %w", err)
	}
	return &Group{store: s, pc: pc, conn: pc.Conn()}, nil
}

var _ idempotency.GroupStore = (*Store)(nil)

// Group is a group transaction on one pooled connection.
type Group struct {
	store  *Store
	pc     *pgxpool.Conn
	conn   *pgx.Conn
	begun  bool
	broken bool
	done   bool
}

// Begin implements idempotency.TxGroup. The member's savepoint goes out
// with its reservation (and the group's BEGIN with the first).
func (g *Group) Begin(ctx context.Context) (idempotency.Tx, error) {
	switch {
	case g.done:
		return nil, idempotency.ErrTxDone
	case g.Broken():
		return nil, idempotency.ErrGroupBroken
	}
	return &Tx{store: g.store, conn: g.conn, group: g, begun: g.begun}, nil
}

// Broken implements idempotency.TxGroup: a member's savepoint could not
// be released or rolled back to, or the connection is gone.
func (g *Group) Broken() bool { return g.broken || (!g.done && g.conn.IsClosed()) }

// Commit implements idempotency.TxGroup.
func (g *Group) Commit(ctx context.Context) error {
	if g.done {
		return idempotency.ErrTxDone
	}
	g.done = true
	defer g.release(ctx)
	switch {
	case g.broken:
		return idempotency.ErrGroupBroken
	case !g.begun:
		return nil
	case g.conn.PgConn().TxStatus() == 'I':
		return idempotency.ErrTxEnded
	}
	tag, err := g.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return commitError("commit group", err)
	}
	if tag.String() == "ROLLBACK" {
		return fmt.Errorf("pgstore: commit group: %w: %w", idempotency.ErrTxAborted, pgx.ErrTxCommitRollback)
	}
	return nil
}

// Rollback implements idempotency.TxGroup.
func (g *Group) Rollback(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	g.release(ctx)
	return nil
}

func (g *Group) release(ctx context.Context) {
	if !g.conn.IsClosed() && g.conn.PgConn().TxStatus() != 'I' {
		_, _ = g.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	g.pc.Release()
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
