package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver the tests use
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/sqlstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dsn string, cfg sqlstore.Config) (*sql.DB, *sqlstore.Store) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.DB = db
	s, err := sqlstore.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS test_effects (id BIGSERIAL PRIMARY KEY, tag TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db, s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		dsn := idempotencytest.PostgresDSN(t)
		db, s := open(t, dsn, sqlstore.Config{})
		return idempotencytest.Harness{
			Store: s,
			Effect: func(ctx context.Context, tag string) error {
				tx, ok := sqlstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no sql tx in context")
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO test_effects (tag) VALUES ($1)`, tag)
				return err
			},
			Effects: func(ctx context.Context, tag string) (int, error) {
				var n int
				err := db.QueryRowContext(ctx, `SELECT count(*) FROM test_effects WHERE tag = $1`, tag).Scan(&n)
				return n, err
			},
			Kill: func(ctx context.Context) error {
				tx, ok := sqlstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no sql tx in context")
				}
				var pid int
				if err := tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
					return err
				}
				// The timeout makes it wait until the backend is gone.
				_, err := db.ExecContext(ctx, "SELECT pg_terminate_backend($1, 10000)", pid)
				return err
			},
			Record: s.Get,
			FailStatement: func(ctx context.Context) error {
				tx, ok := sqlstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no tx in context")
				}
				// A unique violation (23505) within one statement.
				_, err := tx.ExecContext(ctx, `INSERT INTO test_effects (id, tag) VALUES (-1, 'dup'), (-1, 'dup')`)
				return err
			},
			EndTx: func(ctx context.Context) error {
				tx, ok := sqlstore.TxFromContext(ctx)
				if !ok {
					return errors.New("no sql tx in context")
				}
				_, err := tx.ExecContext(ctx, "COMMIT")
				return err
			},
			Replica: func(t *testing.T) idempotency.Store {
				// A long lock timeout: a duplicate that waited on the
				// key instead of answering at once would stall the test.
				_, s := open(t, dsn, sqlstore.Config{LockTimeout: time.Minute})
				return s
			},
		}
	})
}

func TestNewWithoutDB(t *testing.T) {
	t.Parallel()
	if _, err := sqlstore.New(context.Background(), sqlstore.Config{}); !errors.Is(err, sqlstore.ErrNoDB) {
		t.Fatalf("New without a DB: %v", err)
	}
	if _, ok := sqlstore.TxFromContext(context.Background()); ok {
		t.Fatal("TxFromContext outside a gated request reported a tx")
	}
}

// TestHandlerGetsNoCommit: what the handler gets cannot be turned back
// into the *sql.Tx.
func TestHandlerGetsNoCommit(t *testing.T) {
	t.Parallel()
	_, s := open(t, idempotencytest.PostgresDSN(t), sqlstore.Config{})
	g, err := idempotency.New(idempotency.Config{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = g.Do(context.Background(), "alice", "k", "f", func(ctx context.Context) ([]byte, error) {
		tx, ok := sqlstore.TxFromContext(ctx)
		if !ok {
			return nil, errors.New("no tx")
		}
		if _, isTx := tx.(*sql.Tx); isTx {
			return nil, errors.New("the handler got the *sql.Tx itself")
		}
		if _, canCommit := tx.(interface{ Commit() error }); canCommit {
			return nil, errors.New("the handler can commit")
		}
		return []byte("ok"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReserveCompletedKeyWhileTheLockIsBusy: a reservation that finds the
// key's advisory lock taken, here by another transaction that is itself
// only finding the key completed, returns the completed record instead
// of idempotency.ErrInFlight: a finished key never answers 409.
func TestReserveCompletedKeyWhileTheLockIsBusy(t *testing.T) {
	t.Parallel()
	_, s := open(t, idempotencytest.PostgresDSN(t), sqlstore.Config{})
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
