package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
)

// BenchmarkBatchConcurrency drains 5,000 queued creates to the reference
// server (bbolt, fsync) through a proxy adding 50 ms to every request, at
// concurrency 4 and 16, side by side in one run. It reports each one's
// ops/s, c16/c4 (target: never below 1) and how long the first
// operation took to be done at each (target: within 2 round trips,
// first_done_ms ≤ ~100 plus the server's time).
func BenchmarkBatchConcurrency(b *testing.B) {
	const ops = 5000
	concs := []int{4, 16}
	dur := make([]time.Duration, len(concs))
	first := make([]time.Duration, len(concs))
	for b.Loop() {
		for i, conc := range concs {
			b.StopTimer()
			d, f := drainOnce(b, ops, Config{Batch: BatchOn, Concurrency: conc}, func(i int) queue.Write {
				return queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note",
					EntityID: fmt.Sprintf("n%05d", i), Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
			})
			dur[i] += d
			first[i] += f
		}
	}
	n := float64(b.N)
	for i, conc := range concs {
		b.ReportMetric(float64(ops)*n/dur[i].Seconds(), fmt.Sprintf("c%d_ops/s", conc))
		b.ReportMetric(first[i].Seconds()*1000/n, fmt.Sprintf("c%d_first_done_ms", conc))
	}
	b.ReportMetric(dur[0].Seconds()/dur[1].Seconds(), "c16/c4")
}

// BenchmarkHotEntities drains 1,000 queued updates spread over 5
// entities (created and synced first) through a proxy adding 50 ms to
// every request, batched at the default concurrency, and reports ops/s
// (filed at 80–97: one round trip per update, since a partition sends
// its head only).
func BenchmarkHotEntities(b *testing.B) {
	const ops, hot = 1000, 5
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		d, _ := drainOnce(b, ops, Config{Batch: BatchOn}, func(i int) queue.Write {
			return queue.Write{Op: queue.OpUpdate, AccountID: "alice", EntityType: "note",
				EntityID: fmt.Sprintf("h%d", i%hot), Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}, hot)
		total += d
	}
	b.ReportMetric(float64(ops*b.N)/total.Seconds(), "ops/s")
}

// drainOnce queues ops writes (after creating and syncing `pre` entities
// h0..h{pre-1}), starts a daemon against a server 50 ms away and returns
// how long until all were done and until the first was. The timer is
// stopped on entry and left running on return.
func drainOnce(b *testing.B, ops int, cfg Config, write func(int) queue.Write, pre ...int) (all, first time.Duration) {
	b.Helper()
	e := setup(b, envOpts{realClock: true, quietLog: true, cfg: cfg})
	ctx := context.Background()
	base := 0
	if len(pre) > 0 {
		for i := range pre[0] {
			if _, err := e.store.Apply(ctx, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note",
				EntityID: fmt.Sprintf("h%d", i), Data: json.RawMessage(`{}`)}); err != nil {
				b.Fatal(err)
			}
		}
		base = pre[0]
		e.drain()
	}
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Delay, Delay: 50 * time.Millisecond}
	})
	for i := range ops {
		if _, err := e.store.Apply(ctx, write(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	began := time.Now()
	if err := e.d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	e.events.wait(b, "first done", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StateDone] > base
	})
	first = time.Since(began)
	e.events.wait(b, "drained", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StateDone] == base+ops
	})
	return time.Since(began), first
}
