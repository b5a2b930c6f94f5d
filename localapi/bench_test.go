package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// BenchmarkDurableCreates measures durable creates per second through the
// HTTP API (a real loopback server, a real fsyncing bbolt file) with 1, 8
// and 64 concurrent clients, against the ceiling: the same rows (entity,
// operation, index entries, change log) written directly with
// queue.Store.Apply, which group-commits concurrent writers, no HTTP, on
// the same disk in the same run. The two alternate in rounds so drift
// (the page cache, other load on the machine's disk) hits both alike.
//
// It reports http_creates/s, direct_creates/s and ratio (the first over
// the second). Targets (docs/localapi.md says why the first is not the
// issue's 0.8): ratio_vs_boltbatch ≥ 0.7 at 1 client and ≥ 0.5 at 64;
// http_over_bare ≥ 0.95 at 1 client and ≥ 0.85 with more.
//
// A fourth leg, bare, is a reference point for net/http itself: a
// handler that only reads the body, pulls out data, Applies and answers
// 201, on its own store, behind the same client. bare_over_boltbatch is
// about what a minimal net/http server reaches here; http_over_bare is
// what syncd's API (guard, strict parsing, daemon, response) keeps of it.
func BenchmarkDurableCreates(b *testing.B) {
	for _, clients := range []int{1, 8, 64} {
		for _, withKey := range []bool{false, true} {
			name := fmt.Sprintf("clients=%d", clients)
			if withKey {
				name += "/idempotency-key"
			}
			b.Run(name, func(b *testing.B) { benchCreates(b, clients, withKey) })
		}
	}
}

func benchCreates(b *testing.B, clients int, withKey bool) {
	direct, err := queue.Open(filepath.Join(b.TempDir(), "direct.db"), queue.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	// The design's ceiling: the same rows through bbolt's own group
	// commit, DB.Batch sized to the writer count.
	boltBatch, err := queue.Open(filepath.Join(b.TempDir(), "boltbatch.db"), queue.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer boltBatch.Close()
	boltBatch.DB().MaxBatchSize = clients
	e := setup(b, envOptions{account: "alice", durable: true})
	url := e.url + "/v1/entities/note"
	bare, err := queue.Open(filepath.Join(b.TempDir(), "bare.db"), queue.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer bare.Close()
	bareSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Data json.RawMessage }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		op, err := bare.Apply(r.Context(), queue.Write{Op: queue.OpCreate, OperationID: r.Header.Get("Idempotency-Key"), AccountID: "alice", EntityType: "note", Data: in.Data})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"operationId":%q}`, op.Operation.ID)
	}))
	defer bareSrv.Close()
	data := func(i int) string {
		return fmt.Sprintf(`{"title":"note %d","body":"%s","done":false}`, i, strings.Repeat("x", 64))
	}

	// Short rounds, so a slow patch of the shared disk hits both sides.
	chunk := max(100, 8*clients)
	rounds := max(2, b.N/chunk)
	per := max(1, b.N/rounds)
	var httpDur, directDur, batchDur, bareDur time.Duration
	var seq atomic.Int64
	post := func(url string, i int) error {
		key := ""
		if withKey {
			key = fmt.Sprintf("http-%d", i)
		}
		return postCreate(e, url, `{"data":`+data(i)+`}`, key)
	}
	b.ResetTimer()
	for range rounds {
		b.StopTimer()
		directDur += parallel(b, clients, per, func() error {
			i := int(seq.Add(1))
			w := queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", Data: json.RawMessage(data(i))}
			if withKey {
				w.OperationID = fmt.Sprintf("direct-%d", i)
				w.RequestFingerprint = strings.Repeat("f", 64)
			}
			_, err := direct.Apply(context.Background(), w)
			return err
		})
		batchDur += parallel(b, clients, per, func() error {
			i := int(seq.Add(1))
			w := queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", Data: json.RawMessage(data(i))}
			if withKey {
				w.OperationID = fmt.Sprintf("batch-%d", i)
				w.RequestFingerprint = strings.Repeat("f", 64)
			}
			_, err := boltBatch.ApplyViaBoltBatch(context.Background(), w)
			return err
		})
		bareDur += parallel(b, clients, per, func() error { return post(bareSrv.URL, int(seq.Add(1))) })
		b.StartTimer()
		httpDur += parallel(b, clients, per, func() error { return post(url, int(seq.Add(1))) })
	}
	b.StopTimer()
	n := float64(per * rounds)
	httpRate := n / httpDur.Seconds()
	directRate := n / directDur.Seconds()
	b.ReportMetric(httpRate, "http_creates/s")
	b.ReportMetric(directRate, "direct_creates/s")
	batchRate := n / batchDur.Seconds()
	b.ReportMetric(batchRate, "boltbatch_creates/s")
	bareRate := n / bareDur.Seconds()
	b.ReportMetric(bareRate, "bare_creates/s")
	// ratio: against the store's own group commit (the stricter ceiling);
	// ratio_vs_boltbatch: against bbolt's DB.Batch sized to the writers,
	// the ceiling the design names.
	b.ReportMetric(httpRate/directRate, "ratio")
	b.ReportMetric(httpRate/batchRate, "ratio_vs_boltbatch")
	b.ReportMetric(bareRate/batchRate, "bare_over_boltbatch")
	b.ReportMetric(httpRate/bareRate, "http_over_bare")
}

// postCreate is one create through the API at url, as an app makes it.
func postCreate(e *env, url, body, key string) error {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := e.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return err
}

// parallel runs fn n times from clients goroutines and returns the wall
// time.
func parallel(b *testing.B, clients, n int, fn func() error) time.Duration {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := fn(); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	return d
}

// BenchmarkImport is one client importing records: 10,000 creates as
// single POSTs against the same through POST /v1/batch, 100 a call, on
// one fsyncing file each, side by side in one run (alternating in
// rounds). It reports both rates and batch/single (target ≥ 10).
func BenchmarkImport(b *testing.B) {
	const total, per = 10000, 100
	data := func(i int) string {
		return fmt.Sprintf(`{"title":"note %d","body":"%s","done":false}`, i, strings.Repeat("x", 64))
	}
	var singleDur, batchDur time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		single := setup(b, envOptions{account: "alice", durable: true})
		batched := setup(b, envOptions{account: "alice", durable: true})
		b.StartTimer()
		// Rounds of 1,000, alternating, so drift hits both alike.
		for round := range total / 1000 {
			began := time.Now()
			for i := round * 1000; i < (round+1)*1000; i++ {
				if err := postCreate(single, single.url+"/v1/entities/note", `{"data":`+data(i)+`}`, fmt.Sprintf("s-%d", i)); err != nil {
					b.Fatal(err)
				}
			}
			singleDur += time.Since(began)
			began = time.Now()
			for start := round * 1000; start < (round+1)*1000; start += per {
				var ws []string
				for i := start; i < start+per; i++ {
					ws = append(ws, fmt.Sprintf(`{"op":"create","type":"note","data":%s,"idempotencyKey":"b-%d"}`, data(i), i))
				}
				req, _ := http.NewRequest("POST", batched.url+"/v1/batch", strings.NewReader(`{"writes":[`+strings.Join(ws, ",")+`]}`))
				req.Header.Set("Authorization", "Bearer "+testToken)
				req.Header.Set("Content-Type", "application/json")
				res, err := batched.client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("batch: %d", res.StatusCode)
				}
			}
			batchDur += time.Since(began)
		}
		n += total
	}
	b.ReportMetric(float64(n)/singleDur.Seconds(), "single_creates/s")
	b.ReportMetric(float64(n)/batchDur.Seconds(), "batch_creates/s")
	b.ReportMetric(singleDur.Seconds()/batchDur.Seconds(), "batch/single")
}

// BenchmarkOfflineWrites is one client making single durable creates
// through the API of a daemon whose remote is unreachable (a loopback
// port nothing listens on: every send and probe is refused) against the
// same through a daemon whose sending is paused (the remote refused the
// session's token: it awaits a new one), side by side in alternating
// rounds. Both daemons run their workers, prober and puller, as `syncd
// run` does. ratio is offline over paused (issue 28's target: at least
// 0.95): what being offline costs an app's writes.
func BenchmarkOfflineWrites(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	offline := startedEnv(b, dead, "alice.1")

	rs, err := remote.New(remote.Config{DataDir: b.TempDir(), Tokens: map[string]string{"bob.1": "bob"}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(rs.Handler())
	b.Cleanup(func() {
		hs.Close()
		rs.Close()
	})
	paused := startedEnv(b, hs.URL, "alice.refused")
	// The first send meets 401: sending pauses.
	if err := postCreate(paused, paused.url+"/v1/entities/note", `{"data":{"title":"first"}}`, ""); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := paused.d.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if st.Paused {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the daemon whose token the remote refuses did not pause")
		}
		time.Sleep(10 * time.Millisecond) // polling a state in a benchmark's setup
	}

	data := func(i int) string {
		return fmt.Sprintf(`{"data":{"title":"note %d","body":"%s","done":false}}`, i, strings.Repeat("x", 64))
	}
	const round = 100
	rounds := max(2, b.N/round)
	var offDur, pausedDur time.Duration
	i := 0
	b.ResetTimer()
	for range rounds {
		for _, side := range []struct {
			e   *env
			dur *time.Duration
		}{{offline, &offDur}, {paused, &pausedDur}} {
			began := time.Now()
			for range round {
				i++
				if err := postCreate(side.e, side.e.url+"/v1/entities/note", data(i), ""); err != nil {
					b.Fatal(err)
				}
			}
			*side.dur += time.Since(began)
		}
	}
	b.StopTimer()
	if st, err := offline.d.Status(context.Background()); err != nil || st.Online {
		b.Fatalf("the daemon of the dead remote: online %v, %v", st.Online, err)
	}
	n := float64(rounds * round)
	off, pau := n/offDur.Seconds(), n/pausedDur.Seconds()
	b.ReportMetric(off, "offline_creates/s")
	b.ReportMetric(pau, "paused_creates/s")
	b.ReportMetric(off/pau, "ratio")
}

// startedEnv is an env (fsync on) whose daemon is started, sending to
// baseURL, and signed in as alice with token: the daemon `syncd run`
// runs, with default settings.
func startedEnv(b *testing.B, baseURL, token string) *env {
	b.Helper()
	store, err := queue.Open(filepath.Join(b.TempDir(), "syncd.db"), queue.Config{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	tc, err := transport.New(transport.Config{BaseURL: baseURL})
	if err != nil {
		b.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{Store: store, Transport: tc, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(Config{Daemon: d, Token: testToken, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		hs.Close()
		d.Stop(context.Background())
		tc.CloseIdleConnections()
		if err := store.Check(); err != nil {
			b.Errorf("queue invariants after the benchmark: %v", err)
		}
		store.Close()
	})
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := d.SetSession(context.Background(), "alice", token); err != nil {
		b.Fatal(err)
	}
	return &env{t: b, store: store, d: d, srv: srv, url: hs.URL, client: &http.Client{Transport: tr}}
}
