package daemon

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// offlineClient is an HTTP client whose dials fail while offline is set,
// as a laptop without a network: nothing is written, so nothing can
// have reached the server.
func offlineClient(offline *atomic.Bool) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if offline.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// A laptop offline for three weeks sends everything when it is back: an
// operation no attempt of which may have been applied is never failed
// for its age, whether its attempts failed to connect or the server
// answered that it did not process them (503, 429).
func TestOfflineThreeWeeksSendsEverything(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		down faultproxy.Action // zero: the dial fails
	}{
		{name: "no network"},
		{name: "503", down: faultproxy.Action{Kind: faultproxy.Respond, Status: 503, RetryAfter: "3600"}},
		{name: "429", down: faultproxy.Action{Kind: faultproxy.Respond, Status: 429}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var offline, down atomic.Bool
			e := setup(t, envOpts{tcfg: transport.Config{Client: offlineClient(&offline)}})
			defer e.client.CloseIdleConnections()
			if tc.down.Kind == faultproxy.Forward {
				offline.Store(true)
			} else {
				down.Store(true)
				e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
					if down.Load() {
						return tc.down
					}
					return faultproxy.Action{}
				})
			}
			created := e.create("n1", `{"v":1}`)
			e.create("n2", `{"v":1}`)
			e.update("n1", `{"v":2}`)
			deleted := e.create("n3", `{"v":1}`)
			e.del("n3")
			for range 21 * 4 { // three weeks, every six hours
				e.clock.Advance(6 * time.Hour)
				e.drain()
				st, err := e.store.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if n := st.Counts[queue.StatePermanentFailed]; n != 0 {
					op := e.op(created.Operation.ID)
					t.Fatalf("after %v offline: %d operations failed (n1's create: %s %s)", e.clock.Now().Sub(created.Operation.CreatedAt), n, op.LastErrorCode, op.LastError)
				}
			}
			if op := e.op(created.Operation.ID); op.AttemptCount < 2 || op.MaybeApplied {
				t.Fatalf("create attempted %d times, maybeApplied %v", op.AttemptCount, op.MaybeApplied)
			}
			offline.Store(false)
			down.Store(false)
			e.clock.Advance(24 * time.Hour)
			e.drain()
			st, err := e.store.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Counts[queue.StateDone] != 5 {
				t.Fatalf("back online: %v, want all 5 operations done", st.Counts)
			}
			jsonEq(t, e.oneRecord("n1").Data, `{"v":2}`)
			e.oneRecord("n2")
			if rec := e.oneRecord("n3"); !rec.Deleted {
				t.Errorf("n3 not deleted on the server: %+v", rec)
			}
			e.wantState(deleted.Operation.ID, queue.StateDone)
		})
	}
}

// An operation that may have been applied (its request went out and no
// answer came) is still guarded: past MaxOperationAge it fails with
// operation_expired instead of being resent under a key the server may
// have forgotten; and retrying it gives up at Policy.MaxElapsed.
func TestMaybeAppliedOldIsGuarded(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Reset} // written, then the connection died
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StateRetryWaiting); !op.MaybeApplied {
		t.Fatal("a request cut off after it was written is not maybe applied")
	}
	sent := faultproxy.Count(e.proxy.Log(), keyed(c.Operation.ID))
	e.clock.Advance(DefaultMaxOperationAge + time.Minute)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.LastErrorCode != CodeOperationExpired {
		t.Fatalf("code %q, want %s", op.LastErrorCode, CodeOperationExpired)
	}
	if n := faultproxy.Count(e.proxy.Log(), keyed(c.Operation.ID)); n != sent {
		t.Errorf("sent %d more times past its age", n-sent)
	}
}

// The age counts from the latest of creation and the user's retry or a
// renewal (an update of a declined operation's entity): after either,
// an attempt whose answer was lost is guarded again, MaxOperationAge
// after it, not never; and an operation created long before its
// renewal is not expired by its creation date.
func TestRetryAndRenewalRestartTheAge(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"user retry", "renewal"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{})
			var refuse atomic.Bool
			refuse.Store(how == "renewal")
			e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
				if refuse.Load() {
					return faultproxy.Action{Kind: faultproxy.Respond, Status: 403}
				}
				return faultproxy.Action{Kind: faultproxy.Reset}
			})
			c := e.create("n1", `{"v":1}`)
			e.drain()
			e.clock.Advance(DefaultMaxOperationAge + time.Hour)
			e.drain()
			switch how {
			case "user retry":
				if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.LastErrorCode != CodeOperationExpired {
					t.Fatalf("code %q, want %s", op.LastErrorCode, CodeOperationExpired)
				}
				if _, err := e.store.Retry(context.Background(), c.Operation.ID); err != nil {
					t.Fatal(err)
				}
			case "renewal":
				if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); !op.Declined {
					t.Fatalf("a fresh 403 not declined: %s", op.LastErrorCode)
				}
				refuse.Store(false)
				e.update("n1", `{"v":2}`) // the user's fix: a new key
			}
			restart := e.clock.Now()
			e.drain() // the answer is lost: maybe applied now
			op := e.wantState(c.Operation.ID, queue.StateRetryWaiting)
			if !op.MaybeApplied {
				t.Fatal("not maybe applied after a lost answer")
			}
			// Days after the restart, but less than the age: resent.
			e.clock.Advance(DefaultMaxOperationAge - time.Hour)
			sent := faultproxy.Count(e.proxy.Log(), keyed(op.Key()))
			e.drain()
			if n := faultproxy.Count(e.proxy.Log(), keyed(op.Key())); n != sent+1 {
				t.Fatalf("%v after the %s: sent %d times, want once more", e.clock.Now().Sub(restart), how, n-sent)
			}
			// Past the age counted from the restart: guarded, not resent.
			e.clock.Advance(2 * time.Hour)
			e.drain()
			op = e.wantState(c.Operation.ID, queue.StatePermanentFailed)
			if op.LastErrorCode != CodeOperationExpired {
				t.Fatalf("%v after the %s: code %q, want %s", e.clock.Now().Sub(restart), how, op.LastErrorCode, CodeOperationExpired)
			}
			if n := faultproxy.Count(e.proxy.Log(), keyed(op.Key())); n != sent+1 {
				t.Errorf("resent past its age: %d sends, want %d", n, sent+1)
			}
			if !strings.Contains(op.LastError, "old") {
				t.Errorf("message %q", op.LastError)
			}
		})
	}
}
