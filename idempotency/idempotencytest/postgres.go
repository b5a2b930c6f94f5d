package idempotencytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresEnv names the environment variable with the DSN of the
// PostgreSQL database tests may use. .ci/run sets it.
const PostgresEnv = "SYNCD_TEST_POSTGRES_DSN"

// PostgresDSN returns a DSN for a fresh schema in the test database named
// by $SYNCD_TEST_POSTGRES_DSN: the schema is created now, set as the
// connection's search_path in the returned DSN, and dropped when the test
// ends, so parallel tests and packages never see each other's tables.
// Without the variable the test is skipped.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		t.Skip("PostgreSQL tests skipped: set " + PostgresEnv + " (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run them")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", PostgresEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return withParam(base, "search_path", schema)
}

// withParam adds a run-time parameter to a URL or key=value DSN.
func withParam(dsn, name, value string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if strings.Contains(dsn, "?") {
			return dsn + "&" + name + "=" + value
		}
		return dsn + "?" + name + "=" + value
	}
	return dsn + " " + name + "=" + value
}

// TaggedDSN returns dsn with an application_name of its own, and that
// name: AwaitLockWaiters finds the sessions opened with it.
func TaggedDSN(dsn string) (tagged, name string) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name = "idempotencytest_" + hex.EncodeToString(b)
	return withParam(dsn, "application_name", name), name
}

// AwaitLockWaiters returns once n sessions named app (see TaggedDSN)
// wait for an advisory lock, as pg_locks shows them, or with the first
// value from errs (a session that failed instead of waiting), or with
// an error after a minute.
func AwaitLockWaiters(ctx context.Context, dsn, app string, n int, errs <-chan error) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = $1`, app).Scan(&waiting); err != nil {
			return err
		}
		if waiting >= n {
			return nil
		}
		select {
		case err := <-errs:
			return fmt.Errorf("a session ended instead of waiting for the lock: %v", err)
		case <-deadline.C:
			return fmt.Errorf("%d of %d sessions wait for the lock after a minute", waiting, n)
		case <-tick.C:
		}
	}
}
