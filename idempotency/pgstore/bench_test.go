package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// BenchmarkTx compares one store transaction with a reservation and a
// completion against a plain one with the same domain write, without
// HTTP: the database cost of the gate.
func BenchmarkTx(b *testing.B) {
	ctx := context.Background()
	_, s := setupB(b)
	for _, gated := range []bool{false, true} {
		b.Run("gated="+strconv.FormatBool(gated), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				tx, err := s.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				now := time.Now()
				rec := &idempotency.Record{Actor: "bench", Key: strconv.FormatInt(now.UnixNano(), 10) + strconv.Itoa(i), Operation: "create",
					Fingerprint: idempotency.Fingerprint("POST", "/", []byte(`{}`), nil), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
				if gated {
					if _, err := tx.Reserve(ctx, rec, now); err != nil {
						b.Fatal(err)
					}
				}
				ctxTx := idempotency.ContextWithTx(ctx, tx)
				ptx, _ := pgstore.TxFromContext(ctxTx)
				if _, err := ptx.Exec(ctx, `INSERT INTO test_effects (tag) VALUES ($1)`, "x"); err != nil {
					b.Fatal(err)
				}
				if gated {
					rec.Status, rec.ResponseStatus, rec.ResponseBody, rec.CompletedAt = idempotency.StatusCompleted, 201, []byte(`{"id":"x"}`), now
					if err := tx.Complete(ctx, rec); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSweep deletes 200,000 expired records (of 400,000) with the
// keyset walk Sweep uses and with the walk it replaced (each statement
// scanning the sweep index from its start), each with and without a
// REPEATABLE READ session left open meanwhile (whose snapshot keeps the
// deleted rows' index entries from being cleaned up), side by side, and
// reports expired records deleted per second. The keyset walk costs the
// same per record however many there are, so 10M expired records take
// 10M / (records/s); the old walk got slower as the sweep went on.
func BenchmarkSweep(b *testing.B) {
	const total, expired = 400_000, 200_000
	ctx := context.Background()
	rescan := `DELETE FROM idempotency_records WHERE (actor_id, operation_id) IN (
		SELECT actor_id, operation_id FROM idempotency_records
		WHERE sweep_after <= $1 AND expires_at <= $1 LIMIT 1000 FOR UPDATE SKIP LOCKED)`
	for _, open := range []bool{false, true} {
		for _, walk := range []string{"keyset", "rescan"} {
			b.Run(fmt.Sprintf("walk=%s/open_snapshot=%v", walk, open), func(b *testing.B) {
				pool, s := setupB(b)
				now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
				var seconds float64
				for b.Loop() {
					b.StopTimer()
					if _, err := pool.Exec(ctx, `TRUNCATE idempotency_records`); err != nil {
						b.Fatal(err)
					}
					// Half expire an hour before now, in order of key; half a
					// day after.
					if _, err := pool.Exec(ctx, `INSERT INTO idempotency_records
						(actor_id, operation_id, operation_type, request_fingerprint, status, response_status,
						 response_headers, response_body, created_at, completed_at, expires_at, sweep_after)
						SELECT 'bench', 'k' || i, 'create', repeat('0', 64), 'completed', 201, '{}', '{"id":"x"}', $1::timestamptz, $1::timestamptz, e, e
						FROM generate_series(1, $3::int) AS i, LATERAL (SELECT
							CASE WHEN i <= $2::int THEN $1::timestamptz - interval '1 hour' + i * interval '1 ms' ELSE $1::timestamptz + interval '1 day' END AS e) x`, now, expired, total); err != nil {
						b.Fatal(err)
					}
					if _, err := pool.Exec(ctx, `VACUUM ANALYZE idempotency_records`); err != nil {
						b.Fatal(err)
					}
					var reader pgx.Tx
					if open {
						var err error
						if reader, err = pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}); err != nil {
							b.Fatal(err)
						}
						var n int
						if err := reader.QueryRow(ctx, `SELECT count(*) FROM idempotency_records`).Scan(&n); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					began := time.Now()
					n := 0
					if walk == "keyset" {
						var err error
						if n, err = s.Sweep(ctx, now); err != nil {
							b.Fatal(err)
						}
					} else {
						for {
							tag, err := pool.Exec(ctx, rescan, now)
							if err != nil {
								b.Fatal(err)
							}
							n += int(tag.RowsAffected())
							if tag.RowsAffected() < 1000 {
								break
							}
						}
					}
					seconds += time.Since(began).Seconds()
					b.StopTimer()
					if reader != nil {
						reader.Rollback(ctx)
					}
					if n != expired {
						b.Fatalf("swept %d, want %d", n, expired)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(expired*b.N)/seconds, "records/s")
			})
		}
	}
}
