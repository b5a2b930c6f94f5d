package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
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
// the second). Targets: ratio ≥ 0.8 at 1 client, ≥ 0.5 at 64.
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
	data := func(i int) string {
		return fmt.Sprintf(`{"title":"note %d","body":"%s","done":false}`, i, strings.Repeat("x", 64))
	}

	// Short rounds, so a slow patch of the shared disk hits both sides.
	chunk := max(100, 8*clients)
	rounds := max(2, b.N/chunk)
	per := max(1, b.N/rounds)
	var httpDur, directDur, batchDur time.Duration
	var seq atomic.Int64
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
		b.StartTimer()
		httpDur += parallel(b, clients, per, func() error {
			i := int(seq.Add(1))
			req, err := http.NewRequest("POST", url, strings.NewReader(`{"data":`+data(i)+`}`))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set("Content-Type", "application/json")
			if withKey {
				req.Header.Set("Idempotency-Key", fmt.Sprintf("http-%d", i))
			}
			res, err := e.client.Do(req)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				return fmt.Errorf("status %d", res.StatusCode)
			}
			return err
		})
	}
	b.StopTimer()
	n := float64(per * rounds)
	httpRate := n / httpDur.Seconds()
	directRate := n / directDur.Seconds()
	b.ReportMetric(httpRate, "http_creates/s")
	b.ReportMetric(directRate, "direct_creates/s")
	batchRate := n / batchDur.Seconds()
	b.ReportMetric(batchRate, "boltbatch_creates/s")
	// ratio: against the store's own group commit (the stricter ceiling);
	// ratio_vs_boltbatch: against bbolt's DB.Batch sized to the writers,
	// the ceiling the design names.
	b.ReportMetric(httpRate/directRate, "ratio")
	b.ReportMetric(httpRate/batchRate, "ratio_vs_boltbatch")
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
