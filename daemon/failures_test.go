package daemon

// End-to-end tests of DESIGN.md's failure table: daemon + reference
// server + fault proxy between them. The rows that need a process to die
// are in crash_test.go.

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Row "right after an op turns sending" (lease expiry half; the restart
// half is TestCrashAfterClaim): an op left sending by a worker that went
// away is claimed again once its lease expires, then sent.
func TestFailureLeaseExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"v":1}`)
	ghost, err := e.store.Claim(t.Context(), "alice", "ghost-worker", DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := e.d.RunOnce(t.Context()); n != 0 {
		t.Fatalf("claimed %d while the lease holds", n)
	}
	if at, ok := e.d.nextWake(); !ok || !at.Equal(ghost.LeaseExpiresAt) {
		t.Fatalf("next wake %v %v, want the lease expiry %v", at, ok, ghost.LeaseExpiresAt)
	}
	e.clock.Advance(DefaultLease)
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StateDone)
	if op.AttemptCount != 2 {
		t.Errorf("attempts %d, want 2", op.AttemptCount)
	}
	e.oneRecord("n1")
}

// Row "server committed, response lost": the resend replays; one record
// on the server; the entity gets the server's id. For create, update and
// delete.
func TestFailureResponseLost(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.DropResponse}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	u := e.update("n1", `{"v":2}`)
	e.create("n2", `{"v":1}`)
	d := e.del("n2")
	for range 10 {
		e.drain()
		e.clock.Advance(10 * time.Minute) // past any backoff
	}
	for _, id := range []string{c.Operation.ID, u.Operation.ID, d.Operation.ID} {
		e.wantState(id, queue.StateDone)
		if n := faultproxy.Count(e.proxy.Log(), forwardedKey(id)); n < 2 {
			t.Errorf("op %s reached the server %d times, want a resend", id, n)
		}
	}
	rec := e.oneRecord("n1")
	jsonEq(t, rec.Data, `{"v":2}`)
	if ent := e.entity("n1"); ent.ServerID != rec.ID || ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %+v, server record %s", ent, rec.ID)
	}
	if rec2 := e.oneRecord("n2"); !rec2.Deleted {
		t.Errorf("n2 not deleted on the server")
	}
	if n := counter(t, e.remote.Registry(), "idempotency_replays_total", "", ""); n < 4 {
		t.Errorf("server replays %v, want at least 4", n)
	}
}

// Row "same key, other payload": 422 idempotency_key_reused, op
// permanent_failed with payload_conflict, the entity failed.
func TestFailureKeyReusedWithOtherPayload(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	const key = "op-reused-1"
	// Another client (a bug, another device) used the key first.
	o := e.client.Send(t.Context(), transport.Request{
		OperationID: key, Op: transport.OpCreate, EntityType: "note", EntityID: "other",
		Data: []byte(`{"v":"other"}`), PayloadVersion: 1, Token: "alice.9",
	})
	if o.Decision != transport.Done {
		t.Fatalf("seed: %+v", o)
	}
	c := e.apply(queue.Write{Op: queue.OpCreate, EntityID: "n1", Data: []byte(`{"v":1}`), OperationID: key})
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if op.LastErrorCode != transport.CodePayloadConflict {
		t.Fatalf("code %q, want payload_conflict", op.LastErrorCode)
	}
	if ent := e.entity("n1"); ent.SyncState != queue.SyncFailed || ent.SyncError == "" {
		t.Fatalf("entity %s %q", ent.SyncState, ent.SyncError)
	}
	if n := len(e.serverRecords("n1")); n != 0 {
		t.Errorf("server made %d records for n1", n)
	}
	if got := counter(t, e.d.Registry(), "offline_permanent_failures_total", "code", "payload_conflict"); got != 1 {
		t.Errorf("permanent failures %v", got)
	}
}

// Row "the same op sent concurrently": a send hangs, its lease expires, a
// second worker sends the op again; the server makes one record and both
// answers are the same bytes.
func TestFailureSameOpConcurrently(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Concurrency: 2}})
	hold := make(chan struct{})
	var released atomic.Bool
	defer func() {
		if !released.Load() {
			close(hold)
		}
	}()
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.Hold, Hold: hold}
		}
		return faultproxy.Action{}
	})
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.create("n1", `{"v":1}`)
	key := c.Operation.ID
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool { return faultproxy.Count(l, keyed(key)) == 1 }); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(DefaultLease + time.Second)
	e.d.Notify()
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool {
		return faultproxy.Count(l, func(le faultproxy.Entry) bool { return le.Key == key && le.Delivered }) == 1
	}); err != nil {
		t.Fatal(err)
	}
	released.Store(true)
	close(hold)
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool {
		return faultproxy.Count(l, func(le faultproxy.Entry) bool { return le.Key == key && le.Delivered }) == 2
	}); err != nil {
		t.Fatal(err)
	}
	e.events.wait(t, "op done", func(es []queue.Event) bool {
		for _, ev := range es {
			if ev.OperationID == key && ev.State == queue.StateDone {
				return true
			}
		}
		return false
	})
	var bodies [][]byte
	for _, le := range e.proxy.Log() {
		if le.Key == key {
			bodies = append(bodies, le.ServerBody)
		}
	}
	if len(bodies) != 2 || !bytes.Equal(bodies[0], bodies[1]) {
		t.Fatalf("answers differ:\n%s\n%s", bodies[0], bodies[1])
	}
	rec := e.oneRecord("n1")
	e.d.Stop(t.Context())
	if ent := e.entity("n1"); ent.ServerID != rec.ID || ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %+v", ent)
	}
}

// Row "400 payload": permanent_failed, needs user action (see also
// TestValidationFailsPermanently); the user's retry after discarding is
// not needed for other entities: one failed partition blocks no other.
func TestFailureValidationBlocksOnlyItsPartition(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	bad := e.create("bad", `{"invalid":true}`)
	later := e.update("bad", `{"invalid":false}`)
	good := e.create("good", `{"v":1}`)
	e.drain()
	op := e.wantState(bad.Operation.ID, queue.StatePermanentFailed)
	if op.LastErrorCode != transport.CodeValidation {
		t.Fatalf("code %q", op.LastErrorCode)
	}
	e.wantState(later.Operation.ID, queue.StatePending) // waits behind its failed head
	e.wantState(good.Operation.ID, queue.StateDone)
	if n := faultproxy.Count(e.proxy.Log(), keyed(later.Operation.ID)); n != 0 {
		t.Errorf("the update behind a failed create was sent %d times", n)
	}
	// The user discards the failed create: the entity and its update go.
	if err := e.store.Discard(t.Context(), bad.Operation.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if n := len(e.serverRecords("bad")); n != 0 {
		t.Errorf("server holds %d records of the discarded entity", n)
	}
}

// Row "429": resent only after Retry-After (and 503 with Retry-After).
func TestFailureRetryAfter(t *testing.T) {
	t.Parallel()
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{})
			e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
				if r.KeySeen == 1 {
					return faultproxy.Action{Kind: faultproxy.Respond, Status: status, RetryAfter: "30"}
				}
				return faultproxy.Action{}
			})
			c := e.create("n1", `{"v":1}`)
			start := e.clock.Now()
			e.drain()
			op := e.wantState(c.Operation.ID, queue.StateRetryWaiting)
			if op.NextAttemptAt.Before(start.Add(30 * time.Second)) {
				t.Fatalf("next attempt at +%v, before Retry-After", op.NextAttemptAt.Sub(start))
			}
			e.clock.Advance(29 * time.Second)
			e.drain()
			if n := faultproxy.Count(e.proxy.Log(), keyed(op.ID)); n != 1 {
				t.Fatalf("sent %d times before Retry-After passed", n)
			}
			e.clock.Advance(op.NextAttemptAt.Sub(e.clock.Now()))
			e.drain()
			e.wantState(op.ID, queue.StateDone)
			if n := faultproxy.Count(e.proxy.Log(), keyed(op.ID)); n != 2 {
				t.Fatalf("sent %d times, want 2", n)
			}
			e.oneRecord("n1")
		})
	}
}

// Row "logout while a worker runs": account mismatch, nothing is sent
// with the wrong token. Between claim and send the session changes to
// another account: the op goes back to pending unsent. A send already in
// flight when the user logs out is canceled.
func TestFailureLogoutWhileWorkerRuns(t *testing.T) {
	t.Parallel()
	t.Run("between claim and send", func(t *testing.T) {
		t.Parallel()
		var d *Daemon
		var once atomic.Bool
		e := setup(t, envOpts{cfg: Config{TestHookAfterClaim: func(op queue.Operation) {
			if once.CompareAndSwap(false, true) {
				if _, err := d.Logout(context.Background(), LogoutKeep, false); err != nil {
					panic(err)
				}
				if err := d.SetSession(context.Background(), "bob", "bob.1"); err != nil {
					panic(err)
				}
			}
		}}})
		d = e.d
		c := e.create("n1", `{"v":1}`)
		e.drain()
		if n := len(e.proxy.Log()); n != 0 {
			t.Fatalf("%d requests sent; the first with token %q", n, e.proxy.Log()[0].Token)
		}
		op := e.wantState(c.Operation.ID, queue.StatePending)
		if op.AttemptCount != 0 {
			t.Errorf("attempts %d, want 0: nothing was sent", op.AttemptCount)
		}
		// Alice again: it goes, with her token.
		if err := e.d.SetSession(t.Context(), "alice", "alice.2"); err != nil {
			t.Fatal(err)
		}
		e.drain()
		e.wantState(c.Operation.ID, queue.StateDone)
		for _, le := range e.proxy.Log() {
			if le.Token != "alice.2" {
				t.Errorf("alice's op sent with %q", le.Token)
			}
		}
	})
	t.Run("during send", func(t *testing.T) {
		t.Parallel()
		e := setup(t, envOpts{})
		hold := make(chan struct{})
		defer close(hold)
		e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
			return faultproxy.Action{Kind: faultproxy.Hold, Hold: hold}
		})
		c := e.create("n1", `{"v":1}`)
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.d.RunOnce(context.Background())
		}()
		if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool { return len(l) == 1 }); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Logout(t.Context(), LogoutKeep, false); err != nil {
			t.Fatal(err)
		}
		<-done
		if op := e.wantState(c.Operation.ID, queue.StatePending); op.AttemptCount != 1 {
			t.Errorf("attempts %d, want 1: the canceled request may have arrived", op.AttemptCount)
		}
		if err := e.d.SetSession(t.Context(), "bob", "bob.1"); err != nil {
			t.Fatal(err)
		}
		e.drain()
		for _, le := range e.proxy.Log() {
			if le.Token != "alice.1" {
				t.Errorf("request with token %q", le.Token)
			}
		}
		if n := len(e.proxy.Log()); n != 1 {
			t.Errorf("%d requests, want the one canceled", n)
		}
	})
}

// Row "server committed, response lost", by timeout: the request is slow
// to reach the server, the transport gives up, the server commits later;
// the resend is answered from the idempotency record. One record.
func TestFailureTimeoutThenReplay(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{tcfg: transport.Config{Timeout: 100 * time.Millisecond}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.Delay, Delay: 300 * time.Millisecond}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StateRetryWaiting)
	if op.LastErrorCode != transport.CodeTimeout {
		t.Fatalf("code %q, want timeout", op.LastErrorCode)
	}
	// The delayed request reaches the server after the client gave up.
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool { return faultproxy.Count(l, forwardedKey(op.ID)) == 1 }); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(op.NextAttemptAt.Sub(e.clock.Now()))
	e.drain()
	e.wantState(op.ID, queue.StateDone)
	rec := e.oneRecord("n1")
	if ent := e.entity("n1"); ent.ServerID != rec.ID {
		t.Errorf("entity server id %q, record %q", ent.ServerID, rec.ID)
	}
	if n := counter(t, e.remote.Registry(), "idempotency_replays_total", "operation", "create"); n != 1 {
		t.Errorf("replays %v, want 1", n)
	}
}
