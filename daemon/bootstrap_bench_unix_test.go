//go:build unix

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/idempotencytest"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkBootstrap measures a new device's first pull (issue 28): the
// reference server, seeded with bootstrapRecords records of one account
// and run as its own process (the test binary as a child, on bbolt or on
// PostgreSQL), and a fresh daemon in this process (fsync on, as shipped)
// reading the feed over real HTTP on loopback until its pull has caught
// up. It reports changes/s (records in the store over the wall time from
// Start to the pass's end) and daemon_cpu_s/100k: this process's CPU
// time (user + system, getrusage) over the same span, scaled to 100,000
// records; the server's CPU is its own process's, not counted there but
// reported as server_cpu_s/100k where /proc shows it. With
// -short it seeds 2,000 records. Each round bootstraps twice, with
// fetch-ahead and without it (one_at_a_time_changes/s; speedup is the
// ratio). SYNCD_BENCH_CPUPROFILE=file writes a CPU
// profile of the bootstraps alone; SYNCD_BENCH_PULL_LIMIT=n asks for
// pages of n records instead of DefaultPullLimit.
func BenchmarkBootstrap(b *testing.B) {
	stores := []struct {
		name string
		seed func(b *testing.B, n int) (childEnv []string)
	}{
		{"bbolt", seedBolt},
		{"postgres", seedPostgres},
	}
	n := 100_000
	if testing.Short() {
		n = 2_000
	}
	for _, st := range stores {
		b.Run(fmt.Sprintf("%s/records=%d", st.name, n), func(b *testing.B) {
			env := st.seed(b, n)
			srv := startChild(b, append(env, childEnv+"=remote")...)
			url := strings.TrimPrefix(srv.expect(b, "listening "), "listening ")
			// Fetch-ahead on and off alternate, which goes first too, so a
			// slow patch of the shared machine hits both alike.
			var wall, cpu, srvCPU [2]time.Duration
			if path := os.Getenv("SYNCD_BENCH_CPUPROFILE"); path != "" {
				// The bootstrap alone (go test's -cpuprofile would take
				// the seeding in too).
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					b.Fatal(err)
				}
				defer pprof.StopCPUProfile()
			}
			i := 0
			for b.Loop() {
				for _, oneAtATime := range []bool{i%2 == 1, i%2 == 0} {
					s0 := childCPU(srv)
					w, c := bootstrapOnce(b, url, n, oneAtATime)
					wall[b2i(oneAtATime)] += w
					cpu[b2i(oneAtATime)] += c
					srvCPU[b2i(oneAtATime)] += childCPU(srv) - s0
				}
				i++
			}
			runs := float64(b.N)
			b.ReportMetric(float64(n)*runs/wall[0].Seconds(), "changes/s")
			b.ReportMetric(cpu[0].Seconds()/runs*100_000/float64(n), "daemon_cpu_s/100k")
			if srvCPU[0] > 0 {
				b.ReportMetric(srvCPU[0].Seconds()/runs*100_000/float64(n), "server_cpu_s/100k")
			}
			b.ReportMetric(float64(n)*runs/wall[1].Seconds(), "one_at_a_time_changes/s")
			b.ReportMetric(wall[1].Seconds()/wall[0].Seconds(), "speedup")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// bootstrapOnce starts a daemon on a new store against url (fetch-ahead
// off if oneAtATime), waits until
// its full pass has ended, checks that it received n records, and returns
// the wall and CPU time from Start to then.
func bootstrapOnce(b *testing.B, url string, n int, oneAtATime bool) (wall, cpu time.Duration) {
	b.Helper()
	committed := make(chan struct{}, 1)
	s, err := queue.Open(filepath.Join(b.TempDir(), "syncd.db"), queue.Config{OnCommit: func([]queue.Event) {
		select {
		case committed <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	client, err := transport.New(transport.Config{BaseURL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseIdleConnections()
	d, err := New(Config{Store: s, Transport: client, Logger: slog.New(slog.DiscardHandler), Pull: PullOn})
	if err != nil {
		b.Fatal(err)
	}
	d.pull.oneAtATime = oneAtATime
	if v := os.Getenv("SYNCD_BENCH_PULL_LIMIT"); v != "" {
		if d.pullLimit, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := d.SetSession(ctx, "alice", "alice.1"); err != nil {
		b.Fatal(err)
	}
	defer d.Stop(ctx)
	cpu0 := processCPU(b)
	start := time.Now()
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	timeout := time.NewTimer(10 * time.Minute)
	defer timeout.Stop()
	for {
		st, err := s.LoadPullState("alice")
		if err != nil {
			b.Fatal(err)
		}
		if st.Bootstrapped {
			break
		}
		select {
		case <-committed:
		case <-timeout.C:
			b.Fatalf("the pull has not caught up after 10 minutes: %+v", st)
		}
	}
	wall, cpu = time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	defer b.StartTimer()
	st, err := s.LoadPullState("alice")
	if err != nil {
		b.Fatal(err)
	}
	if st.Received != int64(n) {
		b.Fatalf("%d changes received by the bootstrap, want %d", st.Received, n)
	}
	return wall, cpu
}

// processCPU is this process's user and system time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the child's user and system time so far, read from
// /proc (0 where there is none: the metric is then left out).
func childCPU(c *child) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, which is in parentheses:
	// utime and stime are the 12th and 13th, in clock ticks (100 a
	// second on Linux).
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+sys) * 10 * time.Millisecond
}

// seedBolt writes n records into a bbolt file for the child remote (in
// this process, fsync off: only the bootstrap is measured).
func seedBolt(b *testing.B, n int) []string {
	dir := b.TempDir()
	db, err := bolt.Open(filepath.Join(dir, remote.DefaultFileName), 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		b.Fatal(err)
	}
	seedRemote(b, remote.Config{BoltDB: db, DevTokens: true}, n)
	db.NoSync = false
	if err := db.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	return []string{childDirEnv + "=" + dir}
}

// seedPostgres writes n records into a new schema for the child remote
// (synchronous_commit off while seeding).
func seedPostgres(b *testing.B, n int) []string {
	dsn := idempotencytest.PostgresDSN(b)
	seedRemote(b, remote.Config{PostgresDSN: dsn + "&synchronous_commit=off", DevTokens: true}, n)
	return []string{childPostgresEnv + "=" + dsn}
}

// seedRemote creates n notes of alice through cfg's server over HTTP, 16
// at a time.
func seedRemote(b *testing.B, cfg remote.Config, n int) {
	b.Helper()
	srv, err := remote.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	pad := strings.Repeat("x", 64)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || failed.Load() != nil {
					return
				}
				body := fmt.Sprintf(`{"clientId":"r%08d","data":{"title":"a pulled record","body":"%s","done":false,"n":%d},"payloadVersion":1}`, i, pad, i)
				req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/note", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer alice.1")
				req.Header.Set(idempotency.HeaderKey, fmt.Sprintf("seed-%d", i))
				resp, err := hc.Do(req)
				if err != nil {
					failed.Store(err.Error())
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Sprintf("create %d: %s", i, resp.Status))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
}
