package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
	"github.com/syncd/syncd/idempotency/pgstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns a pool on a fresh schema and a store on it.
func setup(t *testing.T, cfg pgstore.Config) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	_, pool, s := setupDSN(t, cfg)
	return pool, s
}

func setupB(b *testing.B) (*pgxpool.Pool, *pgstore.Store) {
	_, pool, s := setupDSN(b, pgstore.Config{})
	return pool, s
}

// setupDSN opens a store on a fresh schema and returns the schema's DSN
// too, for replicas.
func setupDSN(t testing.TB, cfg pgstore.Config) (string, *pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	dsn := idempotencytest.PostgresDSN(t)
	pool, s := openStore(t, dsn, cfg)
	return dsn, pool, s
}

func openStore(t testing.TB, dsn string, cfg pgstore.Config) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg.Pool = pool
	s, err := pgstore.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS test_effects (id BIGSERIAL PRIMARY KEY, tag TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return pool, s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		dsn, pool, s := setupDSN(t, pgstore.Config{})
		return idempotencytest.Harness{
			Store: s,
			EndTx: func(ctx context.Context) error {
				tx, ok := pgstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no pgx tx in context")
				}
				_, err := tx.Exec(ctx, "COMMIT")
				return err
			},
			Replica: func(t *testing.T) idempotency.Store {
				// A long lock timeout: a duplicate that waited on the
				// key instead of answering at once would stall the test.
				_, s := openStore(t, dsn, pgstore.Config{LockTimeout: time.Minute})
				return s
			},
			Effect: func(ctx context.Context, tag string) error {
				tx, ok := pgstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no pgx tx in context")
				}
				_, err := tx.Exec(ctx, `INSERT INTO test_effects (tag) VALUES ($1)`, tag)
				return err
			},
			Effects: func(ctx context.Context, tag string) (int, error) {
				var n int
				err := pool.QueryRow(ctx, `SELECT count(*) FROM test_effects WHERE tag = $1`, tag).Scan(&n)
				return n, err
			},
			Kill: func(ctx context.Context) error {
				tx, ok := pgstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no pgx tx in context")
				}
				var pid int
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				// The timeout makes it wait until the backend is gone.
				_, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid)
				return err
			},
			Record: s.Get,
			FailStatement: func(ctx context.Context) error {
				tx, ok := pgstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no tx in context")
				}
				// A unique violation (23505) within one statement.
				_, err := tx.Exec(ctx, `INSERT INTO test_effects (id, tag) VALUES (-1, 'dup'), (-1, 'dup')`)
				return err
			},
		}
	})
}

// TestLeaseEndsHungTransaction: a transaction that sits idle longer than
// the lease (a hung server) is rolled back by PostgreSQL, so its
// reservation does not block the key.
func TestLeaseEndsHungTransaction(t *testing.T) {
	t.Parallel()
	_, s := setup(t, pgstore.Config{Lease: 100 * time.Millisecond, LockTimeout: 10 * time.Second})
	ctx := context.Background()
	now := time.Now()
	rec := &idempotency.Record{Actor: "alice", Key: "k", Operation: "op", Fingerprint: strings.Repeat("0", 64),
		Status: idempotency.StatusProcessing, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	hung, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := hung.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve: %v %v", old, err)
	}
	// Until the lease ends the hung transaction, another attempt gets
	// ErrInFlight at once; then it takes the key.
	deadline := time.Now().Add(30 * time.Second)
	for {
		next, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old, err := next.Reserve(ctx, rec, now)
		if errors.Is(err, idempotency.ErrInFlight) && time.Now().Before(deadline) {
			_ = next.Rollback(ctx)
			time.Sleep(20 * time.Millisecond) // poll for PostgreSQL ending the session
			continue
		}
		defer next.Rollback(ctx)
		if err != nil || old != nil {
			t.Fatalf("Reserve after the lease: %v %v", old, err)
		}
		break
	}
	if err := hung.Commit(ctx); err == nil {
		t.Fatal("the hung transaction committed after its lease")
	}
	_ = hung.Rollback(ctx)
}

func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	pool, _ := setup(t, pgstore.Config{})
	if _, err := pgstore.New(context.Background(), pgstore.Config{Pool: pool}); err != nil {
		t.Fatalf("second New on a migrated schema: %v", err)
	}
	var v int
	if err := pool.QueryRow(context.Background(), `SELECT version FROM idempotency_schema`).Scan(&v); err != nil || v != len(pgsql.Migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if _, err := pgstore.New(context.Background(), pgstore.Config{}); !errors.Is(err, pgstore.ErrNoPool) {
		t.Fatalf("New without a pool: %v", err)
	}
}

// TestHandlerTx: the handler's pgx.Tx refuses Commit and Rollback, and
// its Begin makes savepoints inside the gated transaction.
func TestHandlerTx(t *testing.T) {
	t.Parallel()
	pool, s := setup(t, pgstore.Config{})
	g, err := idempotency.New(idempotency.Config{Store: s, Actor: func(*http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		t.Fatal(err)
	}
	var handlerErr error
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		tx, ok := pgstore.TxFromContext(ctx)
		if !ok || tx.Conn() != nil {
			handlerErr = errors.New("no tx, or its connection is handed out")
			return
		}
		if err := tx.Commit(ctx); !errors.Is(err, pgstore.ErrTxOwnedByGate) {
			handlerErr = fmt.Errorf("Commit: %v", err)
			return
		}
		if err := tx.Rollback(ctx); !errors.Is(err, pgstore.ErrTxOwnedByGate) {
			handlerErr = fmt.Errorf("Rollback: %v", err)
			return
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			handlerErr = err
			return
		}
		if _, err := sp.Exec(ctx, `INSERT INTO test_effects (tag) VALUES ('undone')`); err != nil {
			handlerErr = err
			return
		}
		if err := sp.Rollback(ctx); err != nil {
			handlerErr = err
			return
		}
		sp2, _ := tx.Begin(ctx)
		if _, err := sp2.Exec(ctx, `INSERT INTO test_effects (tag) VALUES ('kept')`); err != nil {
			handlerErr = err
			return
		}
		if err := sp2.Commit(ctx); err != nil {
			handlerErr = err
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(`{}`))
	req.Header.Set(idempotency.HeaderKey, "k")
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, req)
	if handlerErr != nil || rr.Code != http.StatusCreated {
		t.Fatalf("handler: %d %v", rr.Code, handlerErr)
	}
	var kept, undone int
	ctx := context.Background()
	pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tag = 'kept'), count(*) FILTER (WHERE tag = 'undone') FROM test_effects`).Scan(&kept, &undone)
	if kept != 1 || undone != 0 {
		t.Fatalf("kept %d undone %d", kept, undone)
	}
}

// TestReserveCompletedKeyWhileTheLockIsBusy: a reservation that finds the
// key's advisory lock taken, here by another transaction that is itself
// only finding the key completed, returns the completed record instead
// of idempotency.ErrInFlight: a finished key never answers 409.
func TestReserveCompletedKeyWhileTheLockIsBusy(t *testing.T) {
	t.Parallel()
	_, s := setup(t, pgstore.Config{})
	ctx := context.Background()
	now := time.Now()
	rec := &idempotency.Record{Actor: "alice", Key: "k", Operation: "op", Fingerprint: strings.Repeat("0", 64),
		Status: idempotency.StatusProcessing, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := tx.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve: %+v, %v", old, err)
	}
	done := *rec
	done.Status, done.ResponseStatus, done.CompletedAt = idempotency.StatusCompleted, http.StatusCreated, now
	if err := tx.Complete(ctx, &done); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // the second holds the lock while the first looks
		tx, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		old, err := tx.Reserve(ctx, rec, now)
		if err != nil || old == nil || old.Status != idempotency.StatusCompleted || old.ResponseStatus != http.StatusCreated {
			t.Fatalf("Reserve %d of a completed key: %+v, %v; want the completed record", i+1, old, err)
		}
	}
}

// roundTrips counts what a pgx connection sends: each query and each
// batch is one round trip.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestRoundTrips: through the gate, a fresh create with one domain
// write costs the round trips of the same write in a plain transaction
// (BEGIN, the write, COMMIT: three), since the gate does not read the
// record before it reserves on pgstore (idempotency.ReadingStore) and
// the reservation goes with BEGIN, the completion with COMMIT; a replay
// costs two (the reservation that finds the record, and ROLLBACK).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(idempotencytest.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New(ctx, pgstore.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE test_effects (id BIGSERIAL PRIMARY KEY, tag TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	gate, err := idempotency.New(idempotency.Config{Store: s,
		Actor: func(*http.Request) (string, error) { return "alice", nil }})
	if err != nil {
		t.Fatal(err)
	}
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgstore.TxFromContext(r.Context())
		if !ok {
			t.Error("no transaction")
			return
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO test_effects (tag) VALUES ('rt')`); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusCreated)
	})
	gated, plain := gate.Wrap(create), plainTx(s, create)
	send := func(h http.Handler, key string) (int, int64) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
		req.Header.Set(idempotency.HeaderKey, key)
		w := httptest.NewRecorder()
		before := rt.n.Load()
		h.ServeHTTP(w, req)
		return w.Code, rt.n.Load() - before
	}
	for i, c := range []struct {
		name string
		h    http.Handler
		key  string
		want int64
	}{
		{"plain", plain, "", 3},
		{"gated create", gated, "k1", 3},
		{"gated replay", gated, "k1", 2},
		{"plain again", plain, "", 3},
		{"gated create again", gated, "k2", 3},
	} {
		if code, n := send(c.h, c.key); code != http.StatusCreated || n != c.want {
			t.Errorf("%d %s: status %d, %d round trips; want 201, %d", i, c.name, code, n, c.want)
		}
	}
}

// TestLimitsOfAGatedTransaction: the transaction's lock_timeout and
// idle_in_transaction_session_timeout (Config.LockTimeout and
// Config.Lease), set with the reservation, hold for the handler's
// statements, alone and in a group; and they end with the transaction.
func TestLimitsOfAGatedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := setup(t, pgstore.Config{LockTimeout: 1500 * time.Millisecond, Lease: 45 * time.Second})
	now := time.Now()
	check := func(name string, tx idempotency.Tx, key string) {
		t.Helper()
		rec := &idempotency.Record{Actor: "alice", Key: key, Operation: "op", Fingerprint: strings.Repeat("0", 64),
			Status: idempotency.StatusProcessing, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if old, err := tx.Reserve(ctx, rec, now); err != nil || old != nil {
			t.Fatalf("%s: Reserve: %+v, %v", name, old, err)
		}
		ptx, ok := pgstore.TxFromContext(idempotency.ContextWithTx(ctx, tx))
		if !ok {
			t.Fatalf("%s: no transaction", name)
		}
		var lock, lease string
		if err := ptx.QueryRow(ctx, "SELECT current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout')").Scan(&lock, &lease); err != nil {
			t.Fatal(err)
		}
		if lock != "1500ms" || lease != "45s" {
			t.Errorf("%s: lock_timeout %s, idle_in_transaction_session_timeout %s; want 1500ms, 45s", name, lock, lease)
		}
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("alone", tx, "k1")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := s.BeginGroup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Rollback(ctx)
	for i, key := range []string{"k2", "k3"} {
		m, err := g.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("member %d", i+1), m, key)
		if err := m.Rollback(ctx); err != nil { // the first member's savepoint goes
			t.Fatal(err)
		}
	}
	var lock string
	if err := pool.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&lock); err != nil || lock != "0" {
		t.Fatalf("lock_timeout outside a gated transaction: %q, %v; want 0", lock, err)
	}
}
