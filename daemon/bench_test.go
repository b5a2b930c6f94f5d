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

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// BenchmarkDrain measures operations drained per second from the queue
// to the reference server (bbolt, fsync on both sides, real HTTP on
// loopback) at concurrency 1, 4 and 16, and the same number of plain HTTP
// POSTs of the same bodies to the same server at the same concurrency.
// It reports and prints drained/plain: the share of the server's plain
// throughput the engine keeps (target at least 0.7 at 16), and how many
// local commits (fsyncs) each drained operation cost. Both bbolt files
// share one disk, so the daemon's own fsyncs (claim and outcome) compete
// with the server's; SYNCD_BENCH_NOSYNC=1 turns the daemon's off to show
// what they cost.
func BenchmarkDrain(b *testing.B) {
	for _, conc := range []int{1, 4, 16} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			benchDrain(b, conc)
		})
	}
}

func benchDrain(b *testing.B, conc int) {
	n := max(b.N, 50)
	dir := b.TempDir()
	srv, err := remote.New(remote.Config{DataDir: b.TempDir(), DevTokens: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	// Load the queue (not timed; no fsync while loading).
	path := filepath.Join(dir, "syncd.db")
	s, err := queue.Open(path, queue.Config{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([]json.RawMessage, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				bodies[i] = json.RawMessage(fmt.Sprintf(`{"title":"note %d","body":"some text of a typical note","n":%d}`, i, i))
				if _, err := s.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("d-%d", i), Data: bodies[i]}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()

	// Plain POSTs of the same bodies.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	var next atomic.Int64
	b.ResetTimer()
	plainStart := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
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
	plain := time.Since(plainStart)

	// The daemon drains the queue.
	b.StopTimer()
	done := make(chan struct{})
	var completed, commits atomic.Int64
	s, err = queue.Open(path, queue.Config{NoSync: os.Getenv("SYNCD_BENCH_NOSYNC") == "1", OnCommit: func(es []queue.Event) {
		commits.Add(1)
		for _, e := range es {
			if e.Type == queue.EventOperationState && e.State == queue.StateDone {
				if completed.Add(1) == int64(n) {
					close(done)
				}
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
	d, err := New(Config{Store: s, Transport: client, Concurrency: conc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	drainStart := time.Now()
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	<-done
	drain := time.Since(drainStart)
	b.StopTimer()
	d.Stop(context.Background())
	if st, _ := s.Stats(); st.Counts[queue.StateDone] != n {
		b.Fatalf("done %d of %d", st.Counts[queue.StateDone], n)
	}

	drainRate := float64(n) / drain.Seconds()
	plainRate := float64(n) / plain.Seconds()
	b.ReportMetric(drainRate, "drained/s")
	b.ReportMetric(plainRate, "plain/s")
	b.ReportMetric(drainRate/plainRate, "ratio")
	if n == b.N {
		fmt.Fprintf(os.Stdout, "drain concurrency=%d ops=%d: drained %.0f ops/s, plain POST %.0f/s, ratio %.2f (%.2f local commits per op)\n", conc, n, drainRate, plainRate, drainRate/plainRate, float64(commits.Load())/float64(n))
	}
}
