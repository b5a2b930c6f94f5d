//go:build unix

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOfflineCPU measures the daemon's CPU while the remote is
// unreachable (a port nothing listens on) with operations queued,
// against the same daemon idle (nothing queued), in one run: the share
// of a core each takes over a window, and the ratio. Issue 28's target:
// offline costs what idle does, under 1% of a core. Before the workers
// held the queue for the prober (offlineHold), they claimed and failed
// every ready operation one by one, each with its own commit and
// backoff: 65% of a core with a million queued. SYNCD_BENCH_QUEUED sets
// how many are queued (default 20,000; set 1000000 for the issue's
// figure, which takes minutes to load), SYNCD_BENCH_WINDOW the window
// (default 3s).
func BenchmarkOfflineCPU(b *testing.B) {
	queued := 20_000
	if v, err := strconv.Atoi(os.Getenv("SYNCD_BENCH_QUEUED")); err == nil && v > 0 {
		queued = v
	}
	window := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("SYNCD_BENCH_WINDOW")); err == nil && v > 0 {
		window = v
	}
	// An address nothing listens on: every connection is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	// measure runs a daemon on a store holding n queued creates, signed
	// in, and returns the share of a core the process used over the
	// window, after the first second (the sends in flight fail, the
	// daemon goes offline).
	measure := func(n int) float64 {
		s, err := queue.Open(filepath.Join(b.TempDir(), "syncd.db"), queue.Config{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		const per = 1000
		for i := 0; i < n; i += per {
			ws := make([]queue.Write, 0, per)
			for j := i; j < min(i+per, n); j++ {
				ws = append(ws, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note",
					EntityID: fmt.Sprintf("n%d", j), Data: []byte(`{"title":"a queued note"}`)})
			}
			if _, err := s.ApplyBatch(context.Background(), ws, false); err != nil {
				b.Fatal(err)
			}
		}
		client, err := transport.New(transport.Config{BaseURL: dead})
		if err != nil {
			b.Fatal(err)
		}
		defer client.CloseIdleConnections()
		d, err := New(Config{Store: s, Transport: client, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
			b.Fatal(err)
		}
		if err := d.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer d.Stop(context.Background())
		time.Sleep(time.Second) // a benchmark's settling time, not a test's synchronisation
		c0, t0 := cpuTime(b), time.Now()
		time.Sleep(window)
		return float64(cpuTime(b)-c0) / float64(time.Since(t0))
	}
	for b.Loop() {
		idle := measure(0)
		offline := measure(queued)
		b.ReportMetric(100*idle, "idle-%core")
		b.ReportMetric(100*offline, "offline-%core")
		b.ReportMetric(offline/max(idle, 1e-4), "ratio")
	}
}
