//go:build linux

package daemon

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// TestAttackChainDiskFullAtFollower: the server applied a whole chain;
// the disk fills right before the daemon records a follower (the head
// recorded done already). The answers are kept; when space returns they
// are recorded in order, nothing is sent twice to the server, every
// update is done and the record holds the last data at one version per
// update.
func TestAttackChainDiskFullAtFollower(t *testing.T) {
	for _, at := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			dir := tinyDisk(t, 4<<20)
			var ids []string
			var idx atomic.Value
			idx.Store(map[string]int{})
			full := make(chan func(), 1)
			var filled atomic.Bool
			cfg := Config{Batch: BatchOn, Concurrency: 1,
				Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}
			cfg.TestHookAfterResponse = func(op queue.Operation, o transport.Outcome) {
				i, ok := idx.Load().(map[string]int)[op.ID]
				if ok && i == at && filled.CompareAndSwap(false, true) {
					full <- fillDisk(t, dir)
				}
			}
			e := setup(t, envOpts{dir: dir, realClock: true, cfg: cfg})
			e.create("h", `{"n":0}`)
			e.drain()
			big := strings.Repeat("x", 150<<10)
			m := map[string]int{}
			for k := 1; k <= 5; k++ {
				id := e.update("h", fmt.Sprintf(`{"n":%d,"t":"%s%d"}`, k, big, k)).Operation.ID
				m[id] = k - 1
				ids = append(ids, id)
			}
			idx.Store(m)
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			var free func()
			select {
			case free = <-full:
			case <-time.After(time.Minute): // a deadline, not a wait: -race on a loaded machine is slow
				t.Fatal("the disk never filled")
			}
			time.Sleep(300 * time.Millisecond)
			if err := e.store.Check(); err != nil {
				t.Errorf("invariants with the disk full: %v", err)
			}
			free()
			e.d.Notify()
			waitQuiet(t, e, 20*time.Second)
			for _, id := range ids {
				op := e.op(id)
				if op.State != queue.StateDone {
					t.Errorf("operation %s is %s (%s: %s)", id, op.State, op.LastErrorCode, op.LastError)
				}
				key := []byte(`"` + op.Key() + `"`)
				if n := faultproxy.Count(e.proxy.Log(), func(l faultproxy.Entry) bool {
					return l.Forwarded && (l.Key == op.Key() || bytes.Contains(l.Request.Body, key))
				}); n != 1 {
					t.Errorf("operation %d reached the server %d times, want 1", m[id], n)
				}
			}
			rec := e.oneRecord("h")
			if rec.Version != 6 {
				t.Errorf("record at version %d, want 6", rec.Version)
			}
			if !strings.Contains(string(rec.Data), big+"5") {
				t.Errorf("record does not hold the last data")
			}
			if bad := keyReused(e); len(bad) > 0 {
				t.Errorf("fingerprint mismatch: %v", bad)
			}
			t.Logf("%d chained batches, %d requests", chainedBatches(e), len(e.proxy.Log()))
		})
	}
}
