package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi/client"
)

// cmdBench measures syncd on this machine: durable creates per second
// through the local API, and how soon they are all synced, for each
// number of concurrent clients. Each row is a real daemon (fsync on,
// syncing to the embedded reference server on loopback) in a scratch
// directory, removed afterwards; the user's own syncd and data are not
// touched.
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clientsFlag := fs.String("clients", "1,8,64", "comma-separated numbers of concurrent clients, one row each")
	ops := fs.Int("ops", 2000, "creates per row")
	concurrency := fs.Int("concurrency", daemon.DefaultConcurrency, "operations each daemon sends at once (the concurrency setting): bounds synced/s")
	dir := fs.String("dir", "", "where to put the scratch data (default: the system's temporary directory); give a directory on the disk syncd's data directory is on")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd bench [--clients 1,8,64] [--ops N] [--concurrency N] [--dir DIR]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, "bench"); err != nil {
		return err
	}
	var clients []int
	for f := range strings.SplitSeq(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("%w: bench: --clients %q: want numbers from 1 to 1024", errUsage, *clientsFlag)
		}
		clients = append(clients, n)
	}
	if *ops < 1 || *ops > maxBenchOps {
		return fmt.Errorf("%w: bench: --ops %d: want 1 to %d", errUsage, *ops, maxBenchOps)
	}
	if *concurrency < 1 || *concurrency > maxBenchConcurrency {
		return fmt.Errorf("%w: bench: --concurrency %d: want 1 to %d", errUsage, *concurrency, maxBenchConcurrency)
	}
	base, err := os.MkdirTemp(*dir, "syncd-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(base)
	fmt.Fprintf(stdout, "syncd bench: %d creates per row through the local API, fsync on, synced to the embedded reference server, %d sends at once; scratch data in %s (removed after)\n\n", *ops, *concurrency, base)
	const row = "%7s  %9s  %10s  %10s  %16s  %8s\n" // a row as it is measured
	fmt.Fprintf(stdout, row, "clients", "creates/s", "create p50", "create p99", "all synced after", "synced/s")
	for i, n := range clients {
		r, err := benchRow(ctx, filepath.Join(base, fmt.Sprintf("row%d", i)), n, *ops, *concurrency, stderr)
		if err != nil {
			return fmt.Errorf("bench: %d clients: %w", n, err)
		}
		fmt.Fprintf(stdout, row, strconv.Itoa(n), fmt.Sprintf("%.0f", r.createRate), round(r.p50), round(r.p99), round(r.synced), fmt.Sprintf("%.0f", float64(*ops)/r.synced.Seconds()))
	}
	return nil
}

// maxBenchOps bounds --ops (a latency is kept per create);
// maxBenchConcurrency bounds --concurrency.
const (
	maxBenchOps         = 1_000_000
	maxBenchConcurrency = 256
)

// benchSyncTimeout bounds the wait for a row's creates to be synced.
const benchSyncTimeout = 10 * time.Minute

type benchResult struct {
	createRate float64
	p50, p99   time.Duration
	synced     time.Duration // from the first create until every op is done
}

// benchRow runs one daemon in dataDir and makes ops creates through its
// API from clients goroutines, then waits until the last one is synced.
func benchRow(ctx context.Context, dataDir string, clients, ops, concurrency int, stderr io.Writer) (benchResult, error) {
	var r benchResult
	rc, err := config.Scratch(dataDir)
	if err != nil {
		return r, err
	}
	rc.Concurrency = concurrency
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	addr, token, stopDaemon, err := startDaemon(ctx, rc, logger)
	if err != nil {
		return r, err
	}
	defer stopDaemon()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c, err := client.New(client.Config{Addr: addr, Token: token, HTTPClient: &http.Client{Transport: tr, Timeout: time.Minute}})
	if err != nil {
		return r, err
	}
	// A dev token of the embedded server: its account is "bench".
	if err := c.SetSession(ctx, "bench", "bench.1"); err != nil {
		return r, err
	}

	lat := make([]time.Duration, ops)
	var next atomic.Int64
	var failOnce sync.Once
	var failed error
	var stop atomic.Bool
	data := map[string]any{"title": "syncd bench", "body": strings.Repeat("x", 64), "done": false}
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(ops) && !stop.Load(); i = next.Add(1) - 1 {
				t0 := time.Now()
				if _, err := c.Create(ctx, "note", "", data); err != nil {
					failOnce.Do(func() { failed = err })
					stop.Store(true)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	wrote := time.Since(start)
	if failed != nil {
		return r, failed
	}
	if err := waitSynced(ctx, c, benchSyncTimeout); err != nil {
		return r, err
	}
	r.synced = time.Since(start)
	r.createRate = float64(ops) / wrote.Seconds()
	slices.Sort(lat)
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}

// waitSynced polls the status until no operation is left unfinished. It
// fails when one failed, when sending is paused, or after timeout.
func waitSynced(ctx context.Context, c *client.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		left := st.Counts["pending"] + st.Counts["sending"] + st.Counts["retry_waiting"]
		switch {
		case st.Counts["permanent_failed"] > 0:
			return fmt.Errorf("%d operations failed", st.Counts["permanent_failed"])
		case st.Paused:
			return fmt.Errorf("sending is paused (%s) with %d operations left", st.PauseReason, left)
		case left == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d operations not synced after %v: %w", left, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// round shows a duration with three significant digits or so.
func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
