package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/pgstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns a pool on a fresh schema and a store on it.
func setup(t *testing.T, cfg pgstore.Config) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	return setupTB(t, cfg)
}

func setupB(b *testing.B) (*pgxpool.Pool, *pgstore.Store) { return setupTB(b, pgstore.Config{}) }

func setupTB(t testing.TB, cfg pgstore.Config) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	dsn := idempotencytest.PostgresDSN(t)
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
		pool, s := setup(t, pgstore.Config{})
		return idempotencytest.Harness{
			Store: s,
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
			Record: s.Get,
		}
	})
}

// TestLockTimeoutAnswers409: a replica's duplicate that waits longer than
// LockTimeout for the transaction holding its key gets 409; after the
// first commits, it replays.
func TestLockTimeoutAnswers409(t *testing.T) {
	t.Parallel()
	_, s := setup(t, pgstore.Config{LockTimeout: 50 * time.Millisecond})
	entered, release := make(chan struct{}), make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Block") == "1" {
			close(entered)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"ok":true}`))
	})
	newReplica := func() *httptest.Server {
		g, err := idempotency.New(idempotency.Config{
			Store: s,
			Actor: func(*http.Request) (string, error) { return "alice", nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Wrap(handler))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := newReplica(), newReplica()
	send := func(url string, block bool) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, url+"/x", strings.NewReader(`{}`))
		req.Header.Set(idempotency.HeaderKey, "k1")
		if block {
			req.Header.Set("X-Block", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		resp.Body.Close()
		return resp
	}
	firstDone := make(chan *http.Response, 1)
	go func() { firstDone <- send(a.URL, true) }()
	<-entered
	dup := send(b.URL, false) // blocks in the INSERT until the lock timeout
	close(release)
	first := <-firstDone
	if first == nil || dup == nil {
		t.FailNow()
	}
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d", first.StatusCode)
	}
	if dup.StatusCode != http.StatusConflict || dup.Header.Get("Retry-After") == "" {
		t.Fatalf("duplicate while the first holds the key: %d Retry-After=%q", dup.StatusCode, dup.Header.Get("Retry-After"))
	}
	again := send(b.URL, false)
	if again.StatusCode != http.StatusCreated || again.Header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("after commit: %d replayed=%q", again.StatusCode, again.Header.Get(idempotency.HeaderReplayed))
	}
	http.DefaultClient.CloseIdleConnections()
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
	// The next attempt waits on the key only until the lease ends the
	// hung transaction, then takes it.
	next, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Rollback(ctx)
	if old, err := next.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve after the lease: %v %v", old, err)
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
	if err := pool.QueryRow(context.Background(), `SELECT version FROM idempotency_schema`).Scan(&v); err != nil || v != 1 {
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
		if !ok || tx.Conn() == nil {
			handlerErr = errors.New("no tx")
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
