package remote

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
)

// batchBenchSize is the number of creates per batch in
// BenchmarkBatchCreates: a full batch (idempotency.DefaultBatchMaxOperations).
const batchBenchSize = 100

// BenchmarkBatchCreates measures creates per second over real HTTP on
// loopback, one client, three ways side by side on one server and store:
// 100 creates as one POST /v1/batch whose items commit together (the
// server's batch handler), the same batch served item by item, each in
// its own transaction (the batch handler before issue 28, still
// selectable), and the same 100 creates sent as single requests one after
// another. It reports each rate and batch/single, batch/item-by-item:
// the batch's rate over the others'.
func BenchmarkBatchCreates(b *testing.B) {
	stores := []struct {
		name   string
		config func(b *testing.B) Config
	}{
		{"bbolt", func(b *testing.B) Config { return Config{Path: filepath.Join(b.TempDir(), "remote.db")} }},
		{"postgres", func(b *testing.B) Config { return Config{PostgresDSN: idempotencytest.PostgresDSN(b)} }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			cfg := st.config(b)
			cfg.DevTokens = true
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			grouped := httptest.NewServer(s.Handler())
			defer grouped.Close()
			itemByItem := httptest.NewServer(s.routesWith(s.gate.Wrap, true))
			defer itemByItem.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: 2}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}

			// Alternate the three in rounds so drift (caches, the other
			// engineers' load) hits them alike.
			const rounds = 4
			per := max(b.N/rounds, 1) // batches of batchBenchSize per way and round
			var tBatch, tItems, tSingle time.Duration
			b.ResetTimer()
			for range rounds {
				tBatch += sendBatches(b, client, grouped.URL, per)
				tItems += sendBatches(b, client, itemByItem.URL, per)
				tSingle += sendSingles(b, client, grouped.URL, per*batchBenchSize)
			}
			b.StopTimer()
			n := float64(per * rounds * batchBenchSize)
			b.ReportMetric(n/tBatch.Seconds(), "batch_ops/s")
			b.ReportMetric(n/tItems.Seconds(), "itembyitem_ops/s")
			b.ReportMetric(n/tSingle.Seconds(), "single_ops/s")
			b.ReportMetric(tSingle.Seconds()/tBatch.Seconds(), "batch/single")
			b.ReportMetric(tItems.Seconds()/tBatch.Seconds(), "batch/itembyitem")
		})
	}
}

func benchCreateBody() string {
	return `{"clientId":"` + uuid.NewString() + `","data":{"value":120,"note":"benchmark"},"payloadVersion":1}`
}

// sendBatches sends n batches of batchBenchSize creates and returns the
// wall time; every item must answer 201.
func sendBatches(b *testing.B, client *http.Client, url string, n int) time.Duration {
	b.Helper()
	bodies := make([][]byte, n)
	for i := range bodies {
		ops := make([]idempotency.BatchOperation, batchBenchSize)
		for j := range ops {
			ops[j] = idempotency.BatchOperation{IdempotencyKey: uuid.NewString(), Method: http.MethodPost,
				Path: "/v1/entries", Body: json.RawMessage(benchCreateBody())}
		}
		bodies[i], _ = json.Marshal(map[string]any{"operations": ops})
	}
	start := time.Now()
	for _, body := range bodies {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/batch", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set(idempotency.HeaderKey, uuid.NewString())
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out struct{ Results []idempotency.BatchResult }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || len(out.Results) != batchBenchSize {
			b.Fatalf("batch: %d %v", resp.StatusCode, err)
		}
		for _, r := range out.Results {
			if r.Status != http.StatusCreated {
				b.Fatalf("batch item: %d %s", r.Status, r.Body)
			}
		}
	}
	return time.Since(start)
}

// sendSingles sends n creates one after another and returns the wall
// time.
func sendSingles(b *testing.B, client *http.Client, url string, n int) time.Duration {
	b.Helper()
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = benchCreateBody()
	}
	start := time.Now()
	for _, body := range bodies {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/entries", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set(idempotency.HeaderKey, uuid.NewString())
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatal(fmt.Sprintf("create: %d", resp.StatusCode))
		}
	}
	return time.Since(start)
}
