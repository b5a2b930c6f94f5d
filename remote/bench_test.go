package remote

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
)

// txOnly runs the handler in a store transaction without the gate: the
// same domain code, the same transaction and commit, no reservation,
// fingerprint or stored response. It is the baseline the gate is
// measured against.
func (s *Server) txOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, err := s.idem.Begin(r.Context())
		if err != nil {
			writeError(w, r, http.StatusInternalServerError, CodeInternal, err.Error())
			return
		}
		defer tx.Rollback(r.Context())
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r.WithContext(idempotency.ContextWithTx(r.Context(), tx)))
		if rec.Code < 500 {
			if err := tx.Commit(r.Context()); err != nil {
				writeError(w, r, http.StatusInternalServerError, CodeInternal, err.Error())
				return
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// BenchmarkGateOverhead measures creates per second over real HTTP on
// loopback, through the gate and through the same handler ungated (in a
// plain transaction), side by side on one server and store, and reports
// gated/ungated: the time per gated create over the time per ungated one.
func BenchmarkGateOverhead(b *testing.B) {
	stores := []struct {
		name   string
		config func(b *testing.B) Config
	}{
		{"bbolt", func(b *testing.B) Config { return Config{Path: filepath.Join(b.TempDir(), "remote.db")} }},
		{"postgres", func(b *testing.B) Config { return Config{PostgresDSN: idempotencytest.PostgresDSN(b)} }},
	}
	for _, st := range stores {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/clients=%d", st.name, clients), func(b *testing.B) {
				cfg := st.config(b)
				cfg.DevTokens = true
				s, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				gated := httptest.NewServer(s.Handler())
				defer gated.Close()
				ungated := httptest.NewServer(s.routes(s.txOnly))
				defer ungated.Close()
				tr := &http.Transport{MaxIdleConnsPerHost: 2 * clients}
				defer tr.CloseIdleConnections()
				client := &http.Client{Transport: tr}

				// Alternate the two in rounds so drift (caches, the other
				// engineers' load) hits both alike.
				const rounds = 4
				per := max(b.N/rounds, 1)
				var tGated, tUngated time.Duration
				b.ResetTimer()
				for range rounds {
					tGated += runCreates(b, client, gated.URL, clients, per)
					tUngated += runCreates(b, client, ungated.URL, clients, per)
				}
				b.StopTimer()
				n := float64(per * rounds)
				b.ReportMetric(n/tGated.Seconds(), "gated_creates/s")
				b.ReportMetric(n/tUngated.Seconds(), "ungated_creates/s")
				b.ReportMetric(tGated.Seconds()/tUngated.Seconds(), "gated/ungated")
			})
		}
	}
}

// runCreates sends n creates from clients goroutines and returns the
// wall time.
func runCreates(b *testing.B, client *http.Client, url string, clients, n int) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				body := `{"clientId":"` + uuid.NewString() + `","data":{"value":120,"note":"benchmark"},"payloadVersion":1}`
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/entries", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set(idempotency.HeaderKey, uuid.NewString())
				resp, err := client.Do(req)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body) // so the connection is reused
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					failed.Store(fmt.Sprintf("status %d", resp.StatusCode))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatalf("create failed: %v", f)
	}
	return time.Since(start)
}
