package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/pgstore"
)

// BenchmarkReplayCost measures, over real HTTP on loopback against
// PostgreSQL, an adopter's create route (one INSERT into its own table,
// 201 with the new id) three ways side by side on one server, pool and
// store: fresh gated creates, replays (each completed key sent again),
// and the same handler in a plain transaction without the gate. It
// reports each rate and the ratios replay/create (target ≥ 2: a
// completed key is one indexed read, no transaction, no lock) and
// gated/ungated (creates per second through the gate over creates per
// second without it; target ≥ 0.8 at 64 clients). The three alternate in
// rounds so that drift hits them alike. The pool is pgxpool's default.
//
//	go test -run '^$' -bench ReplayCost -benchtime 6000x ./idempotency/pgstore/
func BenchmarkReplayCost(b *testing.B) {
	for _, clients := range []int{8, 64} {
		b.Run("clients="+strconv.Itoa(clients), func(b *testing.B) {
			ctx := context.Background()
			pool, s := setupB(b)
			if _, err := pool.Exec(ctx, `CREATE TABLE bench_orders (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, item TEXT NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			gate, err := idempotency.New(idempotency.Config{Store: s,
				Actor: func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }})
			if err != nil {
				b.Fatal(err)
			}
			create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, ok := pgstore.TxFromContext(r.Context())
				if !ok {
					idempotency.Error(w, r, http.StatusInternalServerError, "internal", "no transaction")
					return
				}
				body, _ := io.ReadAll(r.Body)
				var id int64
				if err := tx.QueryRow(r.Context(), `INSERT INTO bench_orders (customer, item) VALUES ($1, $2) RETURNING id`,
					r.Header.Get("X-User"), string(body)).Scan(&id); err != nil {
					idempotency.Error(w, r, http.StatusServiceUnavailable, "try_again", err.Error())
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":%d}`, id)
			})
			mux := http.NewServeMux()
			mux.Handle("POST /gated", gate.Wrap(create))
			mux.Handle("POST /plain", plainTx(s, create))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 2 * clients}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}

			const rounds = 3
			per := max(b.N/rounds, clients)
			var tCreate, tReplay, tPlain time.Duration
			var seq atomic.Int64
			b.ResetTimer()
			for round := range rounds {
				keys := make([]string, per)
				for i := range keys {
					keys[i] = fmt.Sprintf("r%d-%d-%d", clients, round, seq.Add(1))
				}
				tCreate += sendAll(b, client, srv.URL+"/gated", clients, keys, http.StatusCreated, false)
				tReplay += sendAll(b, client, srv.URL+"/gated", clients, keys, http.StatusCreated, true)
				tPlain += sendAll(b, client, srv.URL+"/plain", clients, keys, http.StatusCreated, false)
			}
			b.StopTimer()
			n := float64(per * rounds)
			b.ReportMetric(n/tCreate.Seconds(), "creates/s")
			b.ReportMetric(n/tReplay.Seconds(), "replays/s")
			b.ReportMetric(n/tPlain.Seconds(), "ungated_creates/s")
			b.ReportMetric(tCreate.Seconds()/tReplay.Seconds(), "replay/create")
			b.ReportMetric(tPlain.Seconds()/tCreate.Seconds(), "gated/ungated")
		})
	}
}

// plainTx runs next in a plain store transaction, without the gate:
// BEGIN, the handler's statements, COMMIT.
func plainTx(s *pgstore.Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := s.Begin(r.Context())
		if err != nil {
			idempotency.Error(w, r, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		defer tx.Rollback(r.Context())
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r.WithContext(idempotency.ContextWithTx(r.Context(), tx)))
		if err := tx.Commit(r.Context()); err != nil {
			idempotency.Error(w, r, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// sendAll sends one create per key from clients goroutines and returns
// the wall time; every answer must have status want, and be a replay
// exactly when replayed.
func sendAll(b *testing.B, client *http.Client, url string, clients int, keys []string, want int, replayed bool) time.Duration {
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(keys)); i = next.Add(1) - 1 {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`book `+keys[i]))
				req.Header.Set("X-User", "bench")
				req.Header.Set(idempotency.HeaderKey, keys[i])
				resp, err := client.Do(req)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body) // so the connection is reused
				resp.Body.Close()
				if resp.StatusCode != want || (resp.Header.Get(idempotency.HeaderReplayed) == "true") != replayed {
					failed.Store(fmt.Sprintf("%s: status %d replayed=%q", url, resp.StatusCode, resp.Header.Get(idempotency.HeaderReplayed)))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatalf("send failed: %v", f)
	}
	return time.Since(start)
}
