package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/boltstore"
	bolt "go.etcd.io/bbolt"
)

// Mounting the gate in front of a handler. The handler does its domain
// write in the gate's transaction (here a *bolt.Tx; with pgstore, a
// pgx.Tx), so the write and the stored response commit together.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := bolt.Open(filepath.Join(dir, "app.db"), 0o600, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := boltstore.New(db)
	if err != nil {
		log.Fatal(err)
	}

	gate, err := idempotency.New(idempotency.Config{
		Store: store,
		// Your authentication decides the actor; keys are scoped by it.
		Actor: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		// Attempt metadata the client may change between sends of one
		// request; only the fields named here are left out of the
		// fingerprint.
		ExcludedFields: []string{"sentAt"},
	})
	if err != nil {
		log.Fatal(err)
	}

	createEntry := func(w http.ResponseWriter, r *http.Request) {
		tx, _ := boltstore.TxFromContext(r.Context())
		b, err := tx.CreateBucketIfNotExists([]byte("entries"))
		if err != nil {
			http.Error(w, "storage failed", http.StatusInternalServerError) // 5xx: rolled back, not stored
			return
		}
		id, _ := b.NextSequence()
		body, _ := io.ReadAll(r.Body)
		if err := b.Put(fmt.Appendf(nil, "%08d", id), body); err != nil {
			http.Error(w, "storage failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /v1/entries", gate.Wrap(http.HandlerFunc(createEntry)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	send := func(body string) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/entries", strings.NewReader(body))
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", "8b62d456-demo-4d4e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	send(`{"value":120}`)
	send(`{"value": 120, "sentAt": "09:11:10"}`) // the same request, sent again
	send(`{"value":999}`)                        // the same key for another request
	http.DefaultClient.CloseIdleConnections()

	// Output:
	// 201  {"id":1}
	// 201 true {"id":1}
	// 422  {"error":{"code":"idempotency_key_reused","message":"this Idempotency-Key was already used with a different request"}}
}
