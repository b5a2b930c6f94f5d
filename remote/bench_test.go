package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	bolt "go.etcd.io/bbolt"
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

// benchFields is how many fields the record of BenchmarkMergeUpdate has.
const benchFields = 20

// benchRecord is one record BenchmarkMergeUpdate updates, and what the
// client knows of it.
type benchRecord struct {
	typ, id string
	version int64
	values  [benchFields]string
	merge   bool // send the changed field's path (policy merge) or not (lww)
	n       int  // updates sent
}

// nextBody changes the record's next field (in turn) and returns the
// update's body: the whole data, on the known version, with the changed
// field's path under merge.
func (r *benchRecord) nextBody() string {
	f := r.n % benchFields
	r.n++
	r.values[f] = fmt.Sprintf("value %02d rev %08d", f, r.n)
	var sb strings.Builder
	sb.WriteString(`{"data":{`)
	for i, v := range r.values {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"field_%02d":%q`, i, v)
	}
	fmt.Fprintf(&sb, `},"payloadVersion":%d,"baseVersion":%d`, r.n, r.version)
	if r.merge {
		fmt.Fprintf(&sb, `,"paths":["/field_%02d"]`, f)
	}
	sb.WriteByte('}')
	r.version++ // the answer's version, checked in serveUpdates
	return sb.String()
}

// serveUpdates serves bodies as updates of r through h, in this
// goroutine, and returns the time it took.
func serveUpdates(b *testing.B, h http.Handler, r *benchRecord, bodies []string, keys []string) time.Duration {
	b.Helper()
	start := time.Now()
	for i, body := range bodies {
		req := httptest.NewRequest(http.MethodPatch, "/v1/"+r.typ+"/"+r.id, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set(idempotency.HeaderKey, keys[i])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("update of %s: %d %s", r.typ, rec.Code, rec.Body)
		}
	}
	return time.Since(start)
}

// storedSize returns the length of record id as its storage keeps it:
// the remote_entities value on bbolt, pg_column_size of the row on
// PostgreSQL.
func storedSize(b *testing.B, s *Server, id string) int {
	b.Helper()
	n := 0
	switch st := s.store.(type) {
	case *boltEntities:
		if err := st.db.View(func(tx *bolt.Tx) error {
			n = len(tx.Bucket(bucketEntities).Get([]byte(id)))
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	case *pgEntities:
		if err := st.pool.QueryRow(context.Background(), `SELECT pg_column_size(r.*) FROM remote_entities AS r WHERE id = $1`, id).Scan(&n); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// BenchmarkMergeUpdate measures an update of a 20-field record at the
// server, through the real handler (gate included, no network), under
// the merge policy (each update names the one field it changes) and
// under lww (today's record-level update: the whole data, no paths),
// side by side on one server and store, and the record's stored size
// after 20 updates touching each field once (under merge it holds a
// version per changed path). bbolt-nosync leaves out the fsync of each
// commit, which is most of an update's time on bbolt. It reports
// time-ratio (merge over lww per update, the median of 16 rounds) and
// bytes-ratio (merge over lww, the stored record).
func BenchmarkMergeUpdate(b *testing.B) {
	stores := []struct {
		name   string
		config func(b *testing.B) Config
	}{
		{"bbolt", func(b *testing.B) Config { return Config{Path: filepath.Join(b.TempDir(), "remote.db")} }},
		// Without fsync: the CPU part alone, where merging weighs most.
		{"bbolt-nosync", func(b *testing.B) Config {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "remote.db"), 0o600, &bolt.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() }) // after the server's Close, deferred below
			return Config{BoltDB: db}
		}},
		{"postgres", func(b *testing.B) Config { return Config{PostgresDSN: idempotencytest.PostgresDSN(b)} }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			cfg := st.config(b)
			cfg.DevTokens = true
			cfg.Conflicts = map[string]Policy{"merged": PolicyMerge, "whole": PolicyLWW}
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := s.Handler()
			recs := []*benchRecord{{typ: "merged", merge: true}, {typ: "whole"}}
			for _, r := range recs {
				for f := range r.values {
					r.values[f] = fmt.Sprintf("value %02d rev %08d", f, 0)
				}
				body := r.nextBody()
				_, data, _ := strings.Cut(body, `"data":`)
				data, _, _ = strings.Cut(data, `,"payloadVersion"`)
				req := httptest.NewRequest(http.MethodPost, "/v1/"+r.typ, strings.NewReader(`{"clientId":"c","data":`+data+`}`))
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set(idempotency.HeaderKey, uuid.NewString())
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				var e Entity
				if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &e) != nil {
					b.Fatalf("create: %d %s", rec.Code, rec.Body)
				}
				r.id, r.version, r.n = e.ID, e.Version, 0
				// Each field changed once.
				bodies, keys := make([]string, benchFields), make([]string, benchFields)
				for i := range bodies {
					bodies[i], keys[i] = r.nextBody(), uuid.NewString()
				}
				serveUpdates(b, h, r, bodies, keys)
			}
			mergeSize, lwwSize := storedSize(b, s, recs[0].id), storedSize(b, s, recs[1].id)

			// Alternate the two in rounds so drift (caches, the other
			// engineers' load) hits both alike, and take the median of the
			// rounds' ratios, which a burst of load in one round does not
			// move; bodies and keys are made outside the timing.
			const rounds = 16
			per := max(b.N/rounds, 1)
			var took [2]time.Duration
			ratios := make([]float64, rounds)
			b.ResetTimer()
			for round := range rounds {
				var t [2]time.Duration
				for j := range recs {
					k := (round + j) % 2 // each goes first in half the rounds
					b.StopTimer()
					bodies, keys := make([]string, per), make([]string, per)
					for i := range bodies {
						bodies[i], keys[i] = recs[k].nextBody(), uuid.NewString()
					}
					b.StartTimer()
					t[k] = serveUpdates(b, h, recs[k], bodies, keys)
					took[k] += t[k]
				}
				ratios[round] = t[0].Seconds() / t[1].Seconds()
			}
			b.StopTimer()
			slices.Sort(ratios)
			n := float64(per * rounds)
			b.ReportMetric(float64(took[0].Nanoseconds())/n, "merge-ns/update")
			b.ReportMetric(float64(took[1].Nanoseconds())/n, "lww-ns/update")
			b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "time-ratio")
			b.ReportMetric(float64(mergeSize), "merge-B/record")
			b.ReportMetric(float64(lwwSize), "lww-B/record")
			b.ReportMetric(float64(mergeSize)/float64(lwwSize), "bytes-ratio")
		})
	}
}
