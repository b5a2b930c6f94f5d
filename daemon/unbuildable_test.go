package daemon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// An operation whose request cannot be built (reading its entity row
// fails) backs off on the daemon's clock: it is not released and
// claimed again at once, two commits a turn, for as long as the read
// fails. When the read works again it is sent.
func TestUnbuildableRequestBacksOff(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	u := e.update("n1", `{"v":2}`) // an update reads its entity row for the server id

	var broken atomic.Bool
	broken.Store(true)
	e.d.hooks.entityRow = func(account, typ, id string) (queue.Entity, error) {
		if broken.Load() {
			return queue.Entity{}, errors.New("read error (injected)")
		}
		return e.store.EntityRow(account, typ, id)
	}
	var claims atomic.Int64
	e.d.hooks.afterClaim = func(queue.Operation) { claims.Add(1) }
	// states counts the operation's state changes by the state entered.
	states := func() map[queue.State]int {
		e.events.mu.Lock()
		defer e.events.mu.Unlock()
		n := map[queue.State]int{}
		for _, ev := range e.events.events {
			if ev.OperationID == u.Operation.ID && ev.Type == queue.EventOperationState {
				n[ev.State]++
			}
		}
		return n
	}
	before := states()

	// Without time moving, ten passes claim it once.
	for range 10 {
		if _, err := e.d.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := claims.Load(); n != 1 {
		t.Fatalf("claimed %d times in 10 passes without time moving, want 1", n)
	}
	op := e.wantState(u.Operation.ID, queue.StateRetryWaiting)
	if op.LastErrorCode != CodeLocalError || op.MaybeApplied {
		t.Fatalf("code %q maybeApplied %v", op.LastErrorCode, op.MaybeApplied)
	}
	// The wait doubles: 1s, then 2s, then 4s.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if got := e.op(u.Operation.ID).NextAttemptAt.Sub(e.clock.Now()); got != wait {
			t.Fatalf("wait %d is %v, want %v", i, got, wait)
		}
		e.clock.Advance(wait - time.Millisecond)
		e.drain()
		if n := claims.Load(); n != int64(i+1) {
			t.Fatalf("claimed %d times before the wait ended", n)
		}
		e.clock.Advance(time.Millisecond)
		e.drain()
		if n := claims.Load(); n != int64(i+2) {
			t.Fatalf("claimed %d times after wait %d, want %d", n, i, i+2)
		}
	}
	// Each claim is one commit to sending and one to retry_waiting.
	after := states()
	if n, w := after[queue.StateSending]-before[queue.StateSending], after[queue.StateRetryWaiting]; n != int(claims.Load()) || w != n {
		t.Errorf("%d claims: %d changes to sending, %d to retry_waiting", claims.Load(), n, w)
	}
	if n := len(e.proxy.Log()); n != 1 {
		t.Errorf("%d requests sent, want only the create", n)
	}

	broken.Store(false)
	e.clock.Advance(time.Hour)
	e.drain()
	e.wantState(u.Operation.ID, queue.StateDone)
	jsonEq(t, e.oneRecord("n1").Data, `{"v":2}`)
}
