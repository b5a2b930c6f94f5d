package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// BenchmarkDrain measures operations drained per second from the queue
// to the reference server (bbolt, fsync on both sides, real HTTP on
// loopback) at concurrency 1, 4 and 16, and the same number of plain HTTP
// POSTs of the same bodies to the same server at the same concurrency.
// The two alternate in rounds (which goes first alternates too), so a
// slow patch of the shared disk hits both alike. It reports and prints
// drained/plain: the share of the server's plain throughput the engine
// keeps (target at least 0.7 at 16), and how many local commits (fsyncs)
// each drained operation cost. Both bbolt files share one disk, so the
// daemon's own fsyncs (claim and outcome) compete with the server's;
// SYNCD_BENCH_NOSYNC=1 turns the daemon's off to show what they cost.
func BenchmarkDrain(b *testing.B) {
	for _, conc := range []int{1, 4, 16} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			benchDrain(b, conc)
		})
	}
}

func benchDrain(b *testing.B, conc int) {
	const rounds = 8
	per := max(b.N/rounds, 16)
	n := per * rounds
	srv, err := remote.New(remote.Config{DataDir: b.TempDir(), DevTokens: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	var completed, commits atomic.Int64
	var target atomic.Int64
	done := make(chan struct{}, 1)
	s, err := queue.Open(filepath.Join(b.TempDir(), "syncd.db"), queue.Config{NoSync: os.Getenv("SYNCD_BENCH_NOSYNC") == "1", OnCommit: func(es []queue.Event) {
		commits.Add(1)
		for _, e := range es {
			if e.Type == queue.EventOperationState && e.State == queue.StateDone && completed.Add(1) == target.Load() {
				done <- struct{}{}
			}
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	client, err := transport.New(transport.Config{BaseURL: hs.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseIdleConnections()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()

	bodies := make([]json.RawMessage, n)
	for i := range bodies {
		bodies[i] = json.RawMessage(fmt.Sprintf(`{"title":"note %d","body":"some text of a typical note","n":%d}`, i, i))
	}
	// load queues bodies[from:to] (not timed).
	load := func(from, to int) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := from + w; i < to; i += 8 {
					if _, err := s.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("d-%d", i), Data: bodies[i]}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// plain POSTs bodies[from:to] at conc and returns the wall time.
	plain := func(from, to int) time.Duration {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		start := time.Now()
		for range conc {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= to {
						return
					}
					body, _ := json.Marshal(map[string]any{"clientId": fmt.Sprintf("p-%d", i), "data": bodies[i], "payloadVersion": 1})
					req, _ := http.NewRequest("POST", hs.URL+"/v1/note", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer alice.1")
					req.Header.Set("Idempotency-Key", fmt.Sprintf("plain-%d", i))
					resp, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 201 {
						b.Errorf("plain POST: %d", resp.StatusCode)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var drainCommits int64
	// drain starts a daemon, waits until the queue holds no ready
	// operation (completed reaches upTo) and stops it; it returns the
	// wall time from Start.
	drain := func(upTo int) time.Duration {
		d, err := New(Config{Store: s, Transport: client, Concurrency: conc, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
			b.Fatal(err)
		}
		target.Store(int64(upTo))
		c0 := commits.Load()
		defer func() { drainCommits += commits.Load() - c0 }()
		start := time.Now()
		if err := d.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-done
		t := time.Since(start)
		d.Stop(context.Background())
		return t
	}

	var tPlain, tDrain time.Duration
	b.ResetTimer()
	for r := range rounds {
		b.StopTimer()
		load(r*per, (r+1)*per)
		b.StartTimer()
		if r%2 == 0 {
			tPlain += plain(r*per, (r+1)*per)
			tDrain += drain((r + 1) * per)
		} else {
			tDrain += drain((r + 1) * per)
			tPlain += plain(r*per, (r+1)*per)
		}
	}
	b.StopTimer()
	if st, _ := s.Stats(); st.Counts[queue.StateDone] != n {
		b.Fatalf("done %d of %d", st.Counts[queue.StateDone], n)
	}

	drainRate := float64(n) / tDrain.Seconds()
	plainRate := float64(n) / tPlain.Seconds()
	b.ReportMetric(drainRate, "drained/s")
	b.ReportMetric(plainRate, "plain/s")
	b.ReportMetric(drainRate/plainRate, "ratio")
	if b.N > 1 {
		fmt.Fprintf(os.Stdout, "drain concurrency=%d ops=%d: drained %.0f ops/s, plain POST %.0f/s, ratio %.2f (%.2f local commits per op)\n", conc, n, drainRate, plainRate, drainRate/plainRate, float64(drainCommits)/float64(n))
	}
}

// BenchmarkDrainOverLatency drains 1,000 queued creates to the reference
// server through a proxy that adds 50 ms to every request (a distant
// server), at the default concurrency, batched and one request per
// operation, side by side in one run, and reports the ops/s of both and
// batched/single (target at least 10).
func BenchmarkDrainOverLatency(b *testing.B) {
	const ops = 1000
	var batchedDur, singleDur time.Duration
	for b.Loop() {
		for _, mode := range []BatchMode{BatchOn, BatchOff} {
			b.StopTimer()
			e := setup(b, envOpts{realClock: true, quietLog: true, cfg: Config{Batch: mode}})
			e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
				return faultproxy.Action{Kind: faultproxy.Delay, Delay: 50 * time.Millisecond}
			})
			for i := range ops {
				if _, err := e.store.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note",
					EntityID: fmt.Sprintf("n%04d", i), Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			began := time.Now()
			if err := e.d.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			e.events.wait(b, "drained", func([]queue.Event) bool {
				st, err := e.store.Stats()
				return err == nil && st.Counts[queue.StateDone] == ops
			})
			if mode == BatchOn {
				batchedDur += time.Since(began)
			} else {
				singleDur += time.Since(began)
			}
		}
	}
	b.ReportMetric(float64(ops*b.N)/batchedDur.Seconds(), "batched_ops/s")
	b.ReportMetric(float64(ops*b.N)/singleDur.Seconds(), "single_ops/s")
	b.ReportMetric(singleDur.Seconds()/batchedDur.Seconds(), "batched/single")
}
