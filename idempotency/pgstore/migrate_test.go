package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/internal/pgsql"
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

// migration1Reserve and migration1Complete are the reservation and the
// completion of a replica still on schema version 1 (before sweep_after),
// as it runs them while a newer replica has migrated the table.
const (
	migration1Reserve = `INSERT INTO idempotency_records
		(actor_id, operation_id, operation_type, request_fingerprint, status, created_at, expires_at)
		VALUES ($1, $2, 'test', 'f', 'processing', $3, $4)`
	migration1Complete = `UPDATE idempotency_records
		SET status = 'completed', response_status = 201, response_headers = '{}', response_body = '{}',
			completed_at = $3, expires_at = $4
		WHERE actor_id = $1 AND operation_id = $2 AND status = 'processing'`
)

// TestMigrateFromVersion1: New on a table of schema version 1 (the
// sweep's index on expires_at) with records in it migrates to the
// current version: every record keeps its expiry and gets it as its
// sweep_after, the index is on sweep_after, the sweep deletes exactly
// the expired ones, and the gate's records read back as before. A
// replica still on version 1 keeps working meanwhile: its reservation
// gets sweep_after from expires_at (the trigger), and its completion,
// which moves expires_at only, leaves a record the sweep deletes when
// it expires, not before.
func TestMigrateFromVersion1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := idempotencytest.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, pgsql.CreateSchemaTable); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, pgsql.Migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_schema (version) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Version 1's records: a completed one expired, one completed not
	// expired, one left processing (its lease over).
	for _, r := range []struct {
		key              string
		created, expires time.Time
		completed        bool
	}{
		{"expired", now.Add(-8 * 24 * time.Hour), now.Add(-24 * time.Hour), true},
		{"kept", now.Add(-time.Hour), now.Add(7*24*time.Hour - time.Hour), true},
		{"processing", now.Add(-time.Hour), now.Add(-time.Hour + 5*time.Minute), false},
	} {
		if _, err := pool.Exec(ctx, migration1Reserve, "alice", r.key, r.created, r.created.Add(5*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if r.completed {
			if _, err := pool.Exec(ctx, migration1Complete, "alice", r.key, r.created, r.expires); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := pgstore.New(ctx, pgstore.Config{Pool: pool})
	if err != nil {
		t.Fatalf("New on version 1: %v", err)
	}
	var v int
	if err := pool.QueryRow(ctx, `SELECT version FROM idempotency_schema`).Scan(&v); err != nil || v != len(pgsql.Migrations) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(pgsql.Migrations))
	}
	var indexes string
	if err := pool.QueryRow(ctx, `SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'idempotency_records'`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != "idempotency_records_pkey,idempotency_records_sweep_after" {
		t.Fatalf("indexes %s", indexes)
	}
	var off int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE sweep_after IS DISTINCT FROM expires_at`).Scan(&off); err != nil || off != 0 {
		t.Fatalf("%d records with sweep_after other than their expiry, %v", off, err)
	}
	if rec, err := s.Get(ctx, "alice", "kept"); err != nil || rec == nil || rec.Status != idempotency.StatusCompleted ||
		!rec.ExpiresAt.Equal(now.Add(7*24*time.Hour-time.Hour)) {
		t.Fatalf("kept record after the migration: %+v, %v", rec, err)
	}

	// A replica on version 1 reserves and completes a key now.
	if _, err := pool.Exec(ctx, migration1Reserve, "alice", "old replica", now, now.Add(5*time.Minute)); err != nil {
		t.Fatalf("version 1's reservation on the migrated table: %v", err)
	}
	if _, err := pool.Exec(ctx, migration1Complete, "alice", "old replica", now, now.Add(7*24*time.Hour)); err != nil {
		t.Fatal(err)
	}

	if n, err := s.Sweep(ctx, now); err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want 2 (the expired record and the processing one)", n, err)
	}
	for key, want := range map[string]bool{"expired": false, "kept": true, "processing": false, "old replica": true} {
		if rec, err := s.Get(ctx, "alice", key); err != nil || (rec != nil) != want {
			t.Fatalf("%s after the sweep: %+v, %v; want there=%v", key, rec, err, want)
		}
	}
	// The old replica's record: passed over until it expires, then
	// deleted.
	if n, err := s.Sweep(ctx, now.Add(7*24*time.Hour-time.Nanosecond)); err != nil || n != 1 {
		t.Fatalf("sweep before the old replica's record expires: %d, %v; want 1 (the kept record)", n, err)
	}
	if n, err := s.Sweep(ctx, now.Add(7*24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("sweep at the old replica's record's expiry: %d, %v; want 1", n, err)
	}
}
