package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/sqlstore"
)

// TestAppMigrationsUnderTheLock: three replicas open their stores at
// once, each with the application's migration (Config.Migrate). While
// the first runs it, the other two wait on the migration lock (seen in
// pg_locks) instead of running theirs alongside; then each runs it in
// turn, and the application's table is there. A failing migration fails
// New and is rolled back.
func TestAppMigrationsUnderTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, app := idempotencytest.TaggedDSN(idempotencytest.PostgresDSN(t))
	const replicas = 3
	var inside, runs atomic.Int32
	first, proceed := make(chan struct{}), make(chan struct{})
	migrate := func(ctx context.Context, tx *sql.Tx) error {
		if inside.Add(1) != 1 {
			return errors.New("two replicas run the application's migration at once")
		}
		defer inside.Add(-1)
		if runs.Add(1) == 1 {
			close(first)
			<-proceed
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, item TEXT NOT NULL)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS orders_item ON orders (item)`)
		return err
	}
	errs := make(chan error, replicas)
	for range replicas {
		go func() {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				errs <- err
				return
			}
			t.Cleanup(func() { db.Close() })
			_, err = sqlstore.New(ctx, sqlstore.Config{DB: db, Migrate: migrate})
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
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `INSERT INTO orders (item) VALUES ('x')`); err != nil {
		t.Fatalf("the application's table: %v", err)
	}
	_, err = sqlstore.New(ctx, sqlstore.Config{DB: db, Migrate: func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE later (id INT)`); err != nil {
			return err
		}
		return errors.New("boom")
	}})
	if err == nil {
		t.Fatal("New with a failing migration: no error")
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('later') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("the failed migration's table: exists=%v, %v", exists, err)
	}
}
