package daemon

// Attack tests of chains that FAIL on the current code: each shows a
// bug (see the report). Not committed.

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// TestAttackChainBytesUndercounted: the daemon splits a batch by the
// remote's advertised maxBytes, sizing each request with
// transport.Client.BatchItemBytes. A chained request carries
// `"after":N` in the body SendBatch writes; if the sizing leaves it
// out, a chain sized to the limit is over it on the wire, the remote
// answers the whole batch 413, and every item takes that answer: the
// head is declined (a permanent failure the user must act on) for a
// batch the daemon itself made too big.
func TestAttackChainBytesUndercounted(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Concurrency: 1,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}}}})
	e.create("h", `{"n":0}`)
	e.drain() // the record is on the server: its updates may chain

	const followers = 7 // head + 7: the first window (8)
	pad := strings.Repeat("p", 200)
	var ids []string
	for k := 1; k <= followers+1; k++ {
		r := e.update("h", fmt.Sprintf(`{"n":%d,"pad":"%s"}`, k%10, pad))
		ids = append(ids, r.Operation.ID)
	}
	// Size the batch as the daemon does: envelope, every item, commas.
	size := transport.BatchEnvelopeBytes
	for i, id := range ids {
		op := e.op(id)
		r, err := e.d.request(op, "alice.1")
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			size++
			r.Chained = true
		}
		size += e.client.BatchItemBytes(r)
	}
	cs := &capsServer{}
	cs.set(answerJSON(200, fmt.Sprintf(`{"batch":{"maxOperations":100,"maxBytes":%d,"chains":true},"changes":false}`, size)), 100, size)
	cs.serve(e)
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	counts := waitQuiet(t, e, 10*time.Second)
	for _, b := range cs.seen() {
		t.Logf("batch of %d operations, %d bytes (limit %d)", b.ops, b.bytes, size)
		if b.bytes > size {
			t.Errorf("the daemon sent a batch of %d bytes to a remote that advertised %d", b.bytes, size)
		}
	}
	for _, id := range ids {
		if op := e.op(id); op.State != queue.StateDone {
			t.Errorf("operation %s is %s (%s: %s), want done", id, op.State, op.LastErrorCode, op.LastError)
		}
	}
	if counts[queue.StateDone] != len(ids)+1 {
		t.Errorf("counts %v, want %d done", counts, len(ids)+1)
	}
}

// TestAttackChainHeadFailsBeforeSend: the head of a claimed chain stops
// before its send (the age guard fails it: an attempt may have been
// applied and it is older than MaxOperationAge). Its followers were
// claimed with it and are sending; they must not stay sending behind a
// head that is not (Check at every commit).
func TestAttackChainHeadFailsBeforeSend(t *testing.T) {
	t.Parallel()
	var bad atomic.Value
	var e *env
	cfg := Config{Batch: BatchOn, Concurrency: 1, MaxOperationAge: 300 * time.Millisecond,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}}}
	e = setup(t, envOpts{realClock: true, cfg: cfg})
	e.create("h", `{"n":0}`)
	e.drain()
	var ids []string
	for k := 1; k <= 4; k++ {
		ids = append(ids, e.update("h", fmt.Sprintf(`{"n":%d}`, k)).Operation.ID)
	}
	var n atomic.Int64
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path == transport.BatchPath && n.Add(1) == 1 {
			return faultproxy.Action{Kind: faultproxy.DropResponse} // maybe applied
		}
		if r.Path == transport.BatchPath || r.Method == "PATCH" {
			time.Sleep(100 * time.Millisecond)
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	// The head, once permanently failed, stays so: a follower seen
	// sending after that was sending behind a head that is not.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			h, err := e.store.GetOperation(ids[0])
			if err != nil || h.State != queue.StatePermanentFailed {
				continue
			}
			for _, id := range ids[1:] {
				if f, err := e.store.GetOperation(id); err == nil && f.State == queue.StateSending && bad.Load() == nil {
					bad.Store(fmt.Sprintf("follower %s sending (owner %s) behind the head %s, %s", id, f.LeaseOwner, h.ID, h.LastErrorCode))
				}
			}
		}
	}()
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.op(ids[0]).State != queue.StatePermanentFailed && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// The followers are released before the head's failure is recorded:
	// none may be sending now, nor have been seen sending behind it.
	close(stop)
	<-done
	head := e.op(ids[0])
	t.Logf("head %s (%s)", head.State, head.LastErrorCode)
	for _, id := range ids[1:] {
		op := e.op(id)
		if op.State == queue.StateSending {
			t.Errorf("follower %s still sending behind a %s head", id, head.State)
		}
	}
	if v := bad.Load(); v != nil {
		t.Errorf("a follower was sending behind a head that is not: %s", v)
	}
}

// TestAttackChainFormsBehindInFlightSend: the common way a record's
// updates pile up is a user editing while one update is in flight (not
// a queue filled while the daemon was stopped). Once that send is
// answered, the updates queued behind it should go chained (one round
// trip, as BenchmarkHotEntities measures), not one request each.
func TestAttackChainFormsBehindInFlightSend(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn}})
	e.create("h", `{"n":0}`)
	e.drain()
	hold := make(chan struct{})
	var first atomic.Bool
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if (r.Method == "PATCH" || r.Path == transport.BatchPath) && first.CompareAndSwap(false, true) {
			return faultproxy.Action{Kind: faultproxy.Hold, Hold: hold}
		}
		return faultproxy.Action{Kind: faultproxy.Delay, Delay: 5 * time.Millisecond} // a little latency
	})
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	const updates = 20
	e.update("h", `{"n":1}`)
	for !first.Load() {
		time.Sleep(time.Millisecond)
	}
	for k := 2; k <= updates; k++ {
		e.update("h", fmt.Sprintf(`{"n":%d}`, k))
	}
	close(hold)
	settled(t, e, 1+updates)
	if rec := e.oneRecord("h"); rec.Version != 1+updates {
		t.Fatalf("record at version %d", rec.Version)
	}
	sends := 0
	for _, l := range e.proxy.Log() {
		if l.Request.Method == "PATCH" || l.Request.Path == transport.BatchPath {
			sends++
		}
	}
	if chainedBatches(e) == 0 || sends > 5 {
		t.Errorf("%d updates queued behind an update in flight took %d requests (%d of them chained batches): each went alone", updates-1, sends-1, chainedBatches(e))
	}
}
