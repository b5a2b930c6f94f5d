package pgstore_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// TestCompletionIsHOT: the completion's UPDATE changes no indexed column
// (the sweep's index is on sweep_after, which the reservation sets to
// the expiry the completion gives), so PostgreSQL makes it a HOT update:
// no new index entries, a smaller WAL record. Ten creates through a gate
// with the default retention are all HOT; then ten through a gate with
// a retention of a day: the first completion after the change moves
// sweep_after (the store guessed the week it had seen), the other nine
// are HOT again. Every record's sweep_after is its expiry.
func TestCompletionIsHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := idempotencytest.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
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
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgstore.TxFromContext(r.Context())
		if !ok {
			t.Error("no transaction")
			return
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO test_effects (tag) VALUES ('hot')`); err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"x"}`)
	})
	seq := 0
	for _, retention := range []time.Duration{0, 24 * time.Hour} {
		gate, err := idempotency.New(idempotency.Config{Store: s, Retention: retention,
			Actor: func(*http.Request) (string, error) { return "alice", nil }})
		if err != nil {
			t.Fatal(err)
		}
		h := gate.Wrap(create)
		for range 10 {
			seq++
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
			req.Header.Set(idempotency.HeaderKey, fmt.Sprintf("k%d", seq))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusCreated {
				t.Fatalf("create %d: %d %s", seq, w.Code, w.Body)
			}
		}
	}
	// The counters reach pg_stat_user_tables when a backend goes idle
	// or ends.
	pool.Close()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var upd, hot int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'idempotency_records'::regclass`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		if upd >= 20 || time.Now().After(deadline) {
			break
		}
	}
	if upd != 20 || hot != 19 {
		t.Fatalf("%d updates of which %d HOT; want 20 of which 19 (all but the first after the retention changed)", upd, hot)
	}
	var off int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_records WHERE sweep_after <> expires_at OR status <> 'completed'`).Scan(&off); err != nil || off != 0 {
		t.Fatalf("%d records not completed with sweep_after at their expiry, %v", off, err)
	}
}
