package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// TestAppMigrationsUnderTheLock: three replicas open their stores at
// once, each with the application's migration (Config.Migrate). While
// the first runs it, the other two wait on the migration lock (seen in
// pg_locks) instead of running theirs alongside; then each runs it in
// turn, and the application's table is there.
func TestAppMigrationsUnderTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, app := idempotencytest.TaggedDSN(idempotencytest.PostgresDSN(t))
	const replicas = 3
	var inside, runs atomic.Int32
	first, proceed := make(chan struct{}), make(chan struct{})
	migrate := func(ctx context.Context, tx pgx.Tx) error {
		if inside.Add(1) != 1 {
			return errors.New("two replicas run the application's migration at once")
		}
		defer inside.Add(-1)
		if runs.Add(1) == 1 {
			close(first)
			<-proceed
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, item TEXT NOT NULL);
			CREATE INDEX IF NOT EXISTS orders_item ON orders (item)`)
		return err
	}
	errs := make(chan error, replicas)
	for range replicas {
		go func() {
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(pool.Close)
			_, err = pgstore.New(ctx, pgstore.Config{Pool: pool, Migrate: migrate})
			errs <- err
		}()
	}
	<-first
	if err := idempotencytest.AwaitLockWaiters(ctx, dsn, app, replicas-1, errs); err != nil {
		close(proceed)
		t.Fatal(err)
	}
	close(proceed)
	for range replicas {
		if err := <-errs; err != nil {
			t.Fatalf("New: %v", err)
		}
	}
	if n := runs.Load(); n != replicas {
		t.Fatalf("the application's migration ran %d times, want %d", n, replicas)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `INSERT INTO orders (item) VALUES ('x')`); err != nil {
		t.Fatalf("the application's table: %v", err)
	}

	// A failing migration fails New and rolls back with it.
	_, err = pgstore.New(ctx, pgstore.Config{Pool: pool, Migrate: func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE later (id INT)`); err != nil {
			return err
		}
		return errors.New("boom")
	}})
	if err == nil {
		t.Fatal("New with a failing migration: no error")
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('later') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("the failed migration's table: exists=%v, %v", exists, err)
	}
}
