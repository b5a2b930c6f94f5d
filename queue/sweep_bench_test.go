package queue

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// writeEvents appends n operation.state events as a create's are
// written, 10,000 to a transaction.
func writeEvents(tb testing.TB, s *Store, n int) {
	tb.Helper()
	for n > 0 {
		k := min(n, 10000)
		err := s.db.Update(func(tx *bolt.Tx) error {
			w := &txw{tx: tx, s: s, now: s.now(), fill: fills{}}
			op := &Operation{ID: newID(), AccountID: "acct", EntityType: "note", EntityID: newID(), State: StatePending}
			for range k {
				if err := w.opEvent(op); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		n -= k
	}
}

// BenchmarkSweepEvents measures the change-log sweep (fsync off): the
// time of one of its transactions (sweepChunk events), which is how long
// it holds the writer, and its rate in events/s. Each iteration sweeps
// 40,000 events beyond the history.
func BenchmarkSweepEvents(b *testing.B) {
	ctx := context.Background()
	s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	swept, txs := 0, 0
	var spent time.Duration
	for b.Loop() {
		b.StopTimer()
		writeEvents(b, s, 40000)
		b.StartTimer()
		t0 := time.Now()
		_, n, err := s.Sweep(ctx)
		spent += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		swept += n
		txs += (n + sweepChunk - 1) / sweepChunk
	}
	b.ReportMetric(float64(spent.Microseconds())/float64(txs), "µs/sweep_tx")
	b.ReportMetric(float64(swept)/spent.Seconds(), "events/s")
}
