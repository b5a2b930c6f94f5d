package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

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
