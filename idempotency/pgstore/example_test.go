package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// A small service with its own table, orders, whose create route is made
// safe to retry by the gate: the order row, the idempotency record and
// the stored answer commit in one transaction. docs/server.md walks
// through it.
func Example_service() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := pgstore.New(ctx, pgstore.Config{
		Pool: pool, // New creates idempotency_records
		// The service's own tables, under the same lock: replicas that
		// start together migrate one after another.
		Migrate: func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
				id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, item TEXT NOT NULL,
				idempotency_key TEXT NOT NULL, UNIQUE (customer, item))`)
			return err
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	gate, err := idempotency.New(idempotency.Config{
		Store: store,
		// Your authentication decides the actor; keys are scoped by it.
		Actor: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" { // stands in for real authentication
				return u, nil
			}
			return "", errors.New("not signed in")
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	sweeper, _ := idempotency.NewSweeper(idempotency.SweeperConfig{Store: store})
	sweeper.Start(ctx)
	defer sweeper.Stop(context.Background())

	createOrder := func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Item string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item == "" {
			// A refusal: stored, and replayed to a resend of this key.
			// Error answers in the gate's error shape.
			idempotency.Error(w, r, http.StatusBadRequest, "item_required", "an order needs an item")
			return
		}
		tx, _ := pgstore.TxFromContext(r.Context()) // the gate commits it
		key, _ := idempotency.KeyFromContext(r.Context())
		user := r.Header.Get("X-User")
		var id int64
		err := tx.QueryRow(r.Context(), `INSERT INTO orders (customer, item, idempotency_key) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING RETURNING id`, user, in.Item, key).Scan(&id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// A business refusal is final: stored with whatever was
			// written before it.
			idempotency.Error(w, r, http.StatusConflict, "already_ordered", "this item is already ordered")
			return
		case err != nil:
			// 5xx: everything rolled back, the key free for a retry.
			idempotency.Error(w, r, http.StatusServiceUnavailable, "try_again", "the order could not be stored")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]int64{"id": id})
	}

	mux := http.NewServeMux()
	mux.Handle("POST /orders", gate.Wrap(http.HandlerFunc(createOrder)))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}

// A queue consumer makes its effect once per message with Gate.Do: the
// message id is the key, and a redelivered message replays the result.
func ExampleGate_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pgstore.Config{Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	gate, err := idempotency.New(idempotency.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	msg := struct{ ID, Customer, Item string }{"msg-41", "alice", "book"}
	body, _ := json.Marshal(msg)
	result, replayed, err := gate.Do(ctx, msg.Customer, msg.ID, idempotency.Fingerprint("", "orders", body, nil),
		func(ctx context.Context) ([]byte, error) {
			tx, _ := pgstore.TxFromContext(ctx)
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO orders (customer, item, idempotency_key) VALUES ($1, $2, $3) RETURNING id`,
				msg.Customer, msg.Item, msg.ID).Scan(&id); err != nil {
				return nil, err // rolled back; the next delivery runs again
			}
			return json.Marshal(map[string]int64{"id": id})
		})
	switch {
	case errors.Is(err, idempotency.ErrInFlight):
		// another consumer has this message right now: requeue it
	case err != nil:
		log.Print(err)
	default:
		log.Printf("order %s (replayed %v)", result, replayed)
	}
}
