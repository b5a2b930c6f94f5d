package convergence

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestConvergence is the convergence checker (docs/convergence.md): for
// each server setup and conflict policy, real daemons, a real server,
// seeded random writes under kills, cuts and sweeps, then quiet, the
// intents check, resolving what is left, and the diff of every device
// against the server's feed. SYNCD_CONVERGENCE_SEED=N runs seed N;
// SYNCD_SOAK=1 runs the long version.
func TestConvergence(t *testing.T) {
	soak := os.Getenv("SYNCD_SOAK") == "1"
	p := params{devices: 3, steps: 220, pace: 30 * time.Millisecond, daemonKills: 2, offlines: 2,
		serverKills: 1, serverStops: 1, quietTimeout: 60 * time.Second}
	seeds := 1
	if soak {
		p = params{devices: 3, steps: 2500, pace: 30 * time.Millisecond, daemonKills: 12, offlines: 8,
			serverKills: 4, serverStops: 6, quietTimeout: 5 * time.Minute}
		seeds = 3
	}
	var fixed []uint64
	if s := os.Getenv("SYNCD_CONVERGENCE_SEED"); s != "" {
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("SYNCD_CONVERGENCE_SEED=%q: %v", s, err)
			}
			fixed = append(fixed, n)
		}
	}
	syncdBinary(t) // once, before the subtests run in parallel
	t.Parallel()   // beside TestMerge: its runs fill the slots these leave
	configs := []config{
		{name: "bbolt-lww", policy: policyLWW},
		{name: "bbolt-reject", policy: policyReject},
		{name: "bbolt-merge", policy: policyMerge},
		{name: "postgres-lww", postgres: true, policy: policyLWW},
		{name: "postgres-reject", postgres: true, policy: policyReject},
		{name: "postgres-merge", postgres: true, policy: policyMerge},
	}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			if cfg.postgres && os.Getenv("SYNCD_TEST_POSTGRES_DSN") == "" {
				t.Skip("SYNCD_TEST_POSTGRES_DSN is not set")
			}
			t.Parallel() // bounded by -parallel (GOMAXPROCS by default)
			list := fixed
			if list == nil {
				for range seeds {
					list = append(list, rand.Uint64()%1_000_000_000)
				}
			}
			for _, seed := range list {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
					t.Logf("seed %d: reproduce with SYNCD_CONVERGENCE_SEED=%d go test -run 'TestConvergence/%s' ./internal/convergence/", seed, seed, cfg.name)
					checkConvergence(t, cfg, p, seed)
				})
			}
		})
	}
}

// checkConvergence is one run: drive, restore, quiet, intents, settle,
// quiet, diff.
func checkConvergence(t *testing.T, cfg config, p params, seed uint64) {
	start := time.Now()
	r := newRun(t, cfg, p, seed)
	r.drive()
	if t.Failed() {
		return
	}
	driven := time.Since(start)
	r.restoreAll()
	r.noteTombstones()

	quiet1, err := r.waitQuiet(false)
	if err != nil {
		t.Errorf("before resolving: %v", err)
	}
	ir := r.checkIntents()
	for _, v := range ir.violations {
		t.Errorf("lost intent: %s", v)
	}
	for _, u := range ir.unverified {
		t.Logf("could not verify: %s", u)
	}
	if err := r.settleAll(); err != nil {
		t.Errorf("resolving: %v", err)
	}
	quiet2, err := r.waitQuiet(true)
	if err != nil {
		t.Errorf("after resolving: %v", err)
	}
	save := r.p.quietTimeout
	r.p.quietTimeout = min(save, 15*time.Second)
	diffs, err := r.waitConverged()
	r.p.quietTimeout = save
	if err != nil {
		t.Errorf("diff: %v", err)
	}
	swept := 0
	if recs, err := r.c.feed(); err == nil {
		live := map[string]bool{}
		for _, rec := range recs {
			live[rec.ID] = true
		}
		for id := range r.tombstones {
			if !live[id] {
				swept++
			}
		}
	}
	s := r.st
	t.Logf("convergence %s seed=%d: devices=%d replicas=%d writes=%d (refused locally %d: %s) batches=%d ordered=%d intents=%d "+
		"daemon-kills=%d server-kills=%d server-restarts=%d server-starts(sweeps)=%d offline-periods=%d tombstones-seen=%d swept=%d "+
		"mid-run resolves=%d discards=%d; final resolves=%d discards=%d rounds=%d (resolved by %s; paths refused %d); intents done=%d failed-visible=%d held=%d purged-by-checker=%d purged-with-event=%d "+
		"lost=%d unverified=%d; differences=%d; drive %s, quiet %s + %s, total %s",
		cfg.name, seed, p.devices, len(r.c.replicas), s.writes, s.refused, s.refusedSummary(), s.batches, s.orderedBatches, len(r.intents),
		s.daemonKills, s.serverKills, s.serverStops, s.serverStarts, s.offline, len(r.tombstones), swept,
		s.midResolves, s.midDiscards, s.finalResolves, s.finalDiscards, s.resolveRound, countSummary(s.resolvedHow), s.pathsRefused,
		ir.done, ir.failedVisible, ir.held, ir.purgedByChecker, ir.purgedWithEvent, len(ir.violations), len(ir.unverified), len(diffs),
		driven.Round(time.Millisecond), quiet1.Round(time.Millisecond), quiet2.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for _, d := range diffs {
		t.Errorf("difference: %s", d)
		if debugOn {
			t.Log(r.dumpDifference(d))
		}
	}
	if t.Failed() {
		t.Logf("logs in %s (kept: the test failed)", r.c.dir)
		for _, d := range r.c.devices {
			t.Logf("%s log tail:\n%s", d.name, tail(d.log, 15))
		}
	}
}
