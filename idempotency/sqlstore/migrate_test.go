package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
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

// TestMigrateFromVersion1: New on a table of schema version 1 (the
// sweep's index on expires_at) with records in it migrates to the
// current version: each record gets its expiry as its sweep_after, and
// the sweep deletes the expired one only. A record reserved and
// completed through the store after the migration has its expiry as its
// sweep_after too (set at the reservation, left by the completion).
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := idempotencytest.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{pgsql.CreateSchemaTable, pgsql.Migrations[0], `INSERT INTO idempotency_schema (version) VALUES (1)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for key, expires := range map[string]time.Time{"expired": now.Add(-time.Hour), "kept": now.Add(time.Hour)} {
		if _, err := db.ExecContext(ctx, `INSERT INTO idempotency_records
			(actor_id, operation_id, operation_type, request_fingerprint, status, response_status, response_headers, response_body,
				created_at, completed_at, expires_at)
			VALUES ('alice', $1, 'test', 'f', 'completed', 201, '{}', '{}', $2, $2, $3)`, key, expires.Add(-7*24*time.Hour), expires); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sqlstore.New(ctx, sqlstore.Config{DB: db})
	if err != nil {
		t.Fatalf("New on version 1: %v", err)
	}
	var v int
	if err := db.QueryRowContext(ctx, `SELECT version FROM idempotency_schema`).Scan(&v); err != nil || v != len(pgsql.Migrations) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(pgsql.Migrations))
	}

	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := &idempotency.Record{Actor: "alice", Key: "new", Operation: "test", Fingerprint: "f",
		Status: idempotency.StatusProcessing, CreatedAt: now, ExpiresAt: now.Add(idempotency.DefaultProcessingLease)}
	if old, err := tx.Reserve(ctx, rec, now); err != nil || old != nil {
		t.Fatalf("Reserve: %v %v", old, err)
	}
	done := *rec
	done.Status, done.ResponseStatus, done.CompletedAt, done.ExpiresAt = idempotency.StatusCompleted, 201, now, now.Add(idempotency.DefaultRetention)
	if err := tx.Complete(ctx, &done); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var off int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idempotency_records WHERE sweep_after IS DISTINCT FROM expires_at`).Scan(&off); err != nil || off != 0 {
		t.Fatalf("%d records with sweep_after other than their expiry, %v", off, err)
	}
	if n, err := s.Sweep(ctx, now); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1", n, err)
	}
	for key, want := range map[string]bool{"expired": false, "kept": true, "new": true} {
		if rec, err := s.Get(ctx, "alice", key); err != nil || (rec != nil) != want {
			t.Fatalf("%s after the sweep: %+v, %v; want there=%v", key, rec, err, want)
		}
	}
}
