package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// An entity created, updated and deleted offline reaches the server in
// order; the update and delete use the server id the create returned.
func TestDependentOperationsUseServerID(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"title":"a"}`)
	u := e.update("n1", `{"title":"b"}`)
	e.create("n2", `{"title":"x"}`)
	u2 := e.update("n2", `{"body":"y"}`)
	d := e.del("n1")

	if n := e.drain(); n != 5 {
		t.Fatalf("drained %d operations, want 5", n)
	}
	for _, id := range []string{c.Operation.ID, u.Operation.ID, d.Operation.ID, u2.Operation.ID} {
		e.wantState(id, queue.StateDone)
	}
	rec := e.oneRecord("n1")
	if !rec.Deleted {
		t.Errorf("server record of n1 not deleted: %+v", rec)
	}
	jsonEq(t, rec.Data, `{"title":"b"}`)
	if _, err := e.store.EntityRow("alice", "note", "n1"); !errors.Is(err, queue.ErrEntityNotFound) {
		t.Errorf("deleted entity row still there: %v", err)
	}
	rec2 := e.oneRecord("n2")
	jsonEq(t, rec2.Data, `{"title":"x","body":"y"}`)
	ent := e.entity("n2")
	if ent.SyncState != queue.SyncSynced || ent.ServerID != rec2.ID {
		t.Errorf("entity n2: %s server id %q, want synced %q", ent.SyncState, ent.ServerID, rec2.ID)
	}
	// The update went to the server id, not the local id.
	for _, le := range e.proxy.Log() {
		if le.Method == "PATCH" && !strings.HasSuffix(le.Path, "/"+rec2.ID) && !strings.HasSuffix(le.Path, "/"+rec.ID) {
			t.Errorf("update sent to %s", le.Path)
		}
	}
	if !e.d.Online() {
		t.Error("not online after answers")
	}
}

// A network error schedules a retry with backoff; the op goes out again
// only once its next_attempt_at has come on the injected clock.
func TestNetworkErrorRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.Reset}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	if n, err := e.d.RunOnce(t.Context()); n != 1 || err != nil {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	op := e.wantState(c.Operation.ID, queue.StateRetryWaiting)
	if op.LastErrorCode != transport.CodeNetwork {
		t.Errorf("last error code %q, want network", op.LastErrorCode)
	}
	if e.d.Online() {
		t.Error("online after a reset")
	}
	st, _ := e.d.Status(t.Context())
	if st.Online || st.Counts[queue.StateRetryWaiting] != 1 {
		t.Errorf("status %+v", st)
	}
	wait := op.NextAttemptAt.Sub(e.clock.Now())
	if wait < 0 || wait > transport.DefaultBackoffBase {
		t.Fatalf("next attempt in %v, want within the first backoff cap", wait)
	}
	if wait > 0 {
		if n, _ := e.d.RunOnce(t.Context()); n != 0 {
			t.Fatalf("sent %d before next_attempt_at", n)
		}
	}
	e.clock.Advance(wait)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	e.oneRecord("n1")
	if !e.d.Online() {
		t.Error("not online after an answer")
	}
	e.events.wait(t, "connectivity events", func(es []queue.Event) bool {
		var got []string
		for _, ev := range es {
			if ev.Type == EventConnectivityChanged {
				got = append(got, string(ev.Data))
			}
		}
		return strings.Join(got, ",") == `{"online":false},{"online":true}`
	})
}

// When the remote succeeds again after an outage of at least
// reconnectMinOutage, what backed off meanwhile goes at once, without
// waiting out its backoff; an answer that is not a success (503 with
// Retry-After) does not count, and that op keeps its Retry-After.
func TestReconnectSendsWhatWaited(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Rand: func(n int64) int64 { return n - 1 }}}) // the longest backoff
	var offline atomic.Bool
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		switch {
		case offline.Load():
			return faultproxy.Action{Kind: faultproxy.Reset}
		case r.Path == "/v1/note" && strings.Contains(string(r.Body), `"n3"`) && r.KeySeen == 1:
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 503, RetryAfter: "30"}
		}
		return faultproxy.Action{}
	})
	e.create("n0", `{"v":0}`) // the first success since start
	e.drain()

	// An outage: two writes back off, again and again, for over a minute.
	offline.Store(true)
	waited := []string{e.create("n1", `{"v":1}`).Operation.ID, e.create("n2", `{"v":2}`).Operation.ID}
	outage := e.clock.Now()
	for e.clock.Now().Sub(outage) < 2*reconnectMinOutage {
		e.drain()
		e.clock.Advance(e.op(waited[0]).NextAttemptAt.Sub(e.clock.Now()))
	}
	e.drain()
	for _, id := range waited {
		if op := e.wantState(id, queue.StateRetryWaiting); !op.NextAttemptAt.After(e.clock.Now()) {
			t.Fatalf("%s: next attempt %v, want later than now", id, op.NextAttemptAt)
		}
	}

	// The network is back. A 503 is an answer but not a success: nothing
	// else goes.
	offline.Store(false)
	start := e.clock.Now()
	n3 := e.create("n3", `{"v":3}`).Operation.ID
	e.drain()
	e.wantState(waited[0], queue.StateRetryWaiting)
	// A success: the two that waited go without the clock moving.
	e.create("n4", `{"v":4}`)
	e.drain()
	for _, id := range waited {
		e.wantState(id, queue.StateDone)
	}
	e.oneRecord("n1")
	e.oneRecord("n2")
	if op := e.wantState(n3, queue.StateRetryWaiting); op.NextAttemptAt.Before(start.Add(30 * time.Second)) {
		t.Fatalf("n3: next attempt at +%v, before its Retry-After", op.NextAttemptAt.Sub(start))
	}
	if !e.clock.Now().Equal(start) {
		t.Fatal("the clock moved")
	}
}

// A blip shorter than reconnectMinOutage (here: one op's network error
// while others succeed) sends nothing early: that op keeps its backoff.
func TestBlipKeepsBackoff(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Rand: func(n int64) int64 { return n - 1 }}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(string(r.Body), `"bad"`) {
			return faultproxy.Action{Kind: faultproxy.Reset}
		}
		return faultproxy.Action{}
	})
	e.create("n0", `{"v":0}`) // the first success since start
	e.drain()
	bad := e.create("bad", `{"v":1}`).Operation.ID
	e.drain()
	for i := range 3 {
		e.create(strconv.Itoa(i), `{"v":2}`)
		e.drain()
	}
	if op := e.wantState(bad, queue.StateRetryWaiting); op.AttemptCount != 1 {
		t.Fatalf("the failing op was sent %d times, want once", op.AttemptCount)
	}
}

// 401 pauses the account and emits session.refresh_needed; nothing is
// sent until a new token arrives, then the op goes with the new token.
func TestUnauthorizedPausesUntilNewToken(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Token == "alice.1" {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 401}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	e.create("n2", `{"v":2}`)
	e.drain()
	st, err := e.d.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Paused || st.PauseReason != PauseSessionRefreshNeeded {
		t.Fatalf("status %+v, want paused for a session refresh", st)
	}
	if op := e.op(c.Operation.ID); op.State != queue.StatePending && op.State != queue.StateSending {
		t.Fatalf("op is %s, want pending", op.State)
	}
	e.events.wait(t, "session.refresh_needed", func(es []queue.Event) bool {
		for _, ev := range es {
			if ev.Type == EventSessionRefreshNeeded && ev.AccountID == "alice" {
				return true
			}
		}
		return false
	})
	before := len(e.proxy.Log())
	if n, _ := e.d.RunOnce(t.Context()); n != 0 {
		t.Fatalf("claimed %d while paused", n)
	}
	if got := len(e.proxy.Log()); got != before {
		t.Fatalf("sent %d requests while paused", got-before)
	}
	if err := e.d.SetSession(t.Context(), "alice", "alice.2"); err != nil {
		t.Fatal(err)
	}
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	e.oneRecord("n1")
	e.oneRecord("n2")
	if st, _ := e.d.Status(t.Context()); st.Paused {
		t.Fatalf("still paused: %+v", st)
	}
}

// An operation whose account is not the session's is never sent.
func TestOtherAccountNeverSent(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	b := e.apply(queue.Write{Op: queue.OpCreate, AccountID: "bob", EntityID: "b1", Data: []byte(`{"v":1}`)})
	a := e.create("a1", `{"v":1}`)
	e.drain()
	e.wantState(a.Operation.ID, queue.StateDone)
	e.wantState(b.Operation.ID, queue.StatePending)
	for _, le := range e.proxy.Log() {
		if le.Token != "alice.1" || le.Key == b.Operation.ID {
			t.Errorf("request %s with token %q sent while alice is signed in", le.Key, le.Token)
		}
	}
	// Signed out: nothing at all.
	if _, err := e.d.Logout(t.Context(), LogoutKeep, false); err != nil {
		t.Fatal(err)
	}
	e.create("a2", `{"v":2}`)
	if n, _ := e.d.RunOnce(t.Context()); n != 0 {
		t.Fatalf("claimed %d while signed out", n)
	}
	// Bob signs in: his op goes with his token.
	if err := e.d.SetSession(t.Context(), "bob", "bob.1"); err != nil {
		t.Fatal(err)
	}
	e.drain()
	e.wantState(b.Operation.ID, queue.StateDone)
	for _, le := range e.proxy.Log() {
		if le.Key == b.Operation.ID && le.Token != "bob.1" {
			t.Errorf("bob's op sent with %q", le.Token)
		}
	}
}

// Permanent and needs-user-action outcomes fail the op with its code and
// turn the entity failed with a readable syncError.
func TestValidationFailsPermanently(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"invalid":true}`)
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if op.LastErrorCode != transport.CodeValidation {
		t.Fatalf("code %q, want validation", op.LastErrorCode)
	}
	ent := e.entity("n1")
	if ent.SyncState != queue.SyncFailed || !strings.Contains(ent.SyncError, "validation") {
		t.Fatalf("entity %s %q", ent.SyncState, ent.SyncError)
	}
	if got := counter(t, e.d.Registry(), "offline_permanent_failures_total", "code", "validation"); got != 1 {
		t.Errorf("offline_permanent_failures_total{code=validation} = %v", got)
	}
	if n := len(e.serverRecords("n1")); n != 0 {
		t.Errorf("server holds %d records", n)
	}
}

// An operation attempted before and older than MaxOperationAge is not
// resent; one never attempted is sent whatever its age.
func TestOperationExpired(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Policy: transport.Policy{MaxElapsed: 30 * 24 * time.Hour}}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(string(r.Body), `"old"`) && r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.Reset}
		}
		return faultproxy.Action{}
	})
	old := e.create("old", `{"v":"old"}`)
	e.drain()
	e.wantState(old.Operation.ID, queue.StateRetryWaiting)
	e.clock.Advance(DefaultMaxOperationAge + time.Hour)
	fresh := e.create("fresh", `{"v":1}`)
	e.clock.Advance(DefaultMaxOperationAge + time.Hour) // fresh is old too, but never sent
	e.drain()
	op := e.wantState(old.Operation.ID, queue.StatePermanentFailed)
	if op.LastErrorCode != CodeOperationExpired {
		t.Fatalf("code %q, want %s", op.LastErrorCode, CodeOperationExpired)
	}
	e.wantState(fresh.Operation.ID, queue.StateDone)
	if n := faultproxy.Count(e.proxy.Log(), keyed(old.Operation.ID)); n != 1 {
		t.Errorf("expired op sent %d times, want 1", n)
	}
	// The user reviewed it and retries: that confirms the intent, so it is
	// sent despite its age.
	if _, err := e.store.Retry(context.Background(), old.Operation.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	e.wantState(old.Operation.ID, queue.StateDone)
	if n := faultproxy.Count(e.proxy.Log(), keyed(old.Operation.ID)); n != 2 {
		t.Errorf("op sent %d times after the user's retry, want 2", n)
	}
}

// Retrying an operation that may have been applied (a 500: the server
// may have committed before failing) stops by elapsed time: past the
// policy's MaxElapsed the op fails with retry_expired. (One that cannot
// have been applied never does: TestOfflineThreeWeeksSendsEverything.)
func TestRetryExpired(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{
		Policy: transport.Policy{MaxElapsed: time.Minute, Backoff: transport.Backoff{Base: time.Hour}},
		Rand:   func(n int64) int64 { return n - 1 },
	}})
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Respond, Status: 500}
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if op.LastErrorCode != CodeRetryExpired || !op.MaybeApplied {
		t.Fatalf("code %q, maybeApplied %v", op.LastErrorCode, op.MaybeApplied)
	}
	if got := counter(t, e.d.Registry(), "offline_attempts_total", "result", transport.CodeServerError); got != 1 {
		t.Errorf("offline_attempts_total{result=server_error} = %v", got)
	}
}

// Start drains on writes; Stop is safe twice and before Start.
func TestStartStop(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true})
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Start(t.Context()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	var ids []string
	for i := range 20 {
		ids = append(ids, e.create("n"+string(rune('a'+i)), `{"v":1}`).Operation.ID)
	}
	e.events.wait(t, "all done", func(es []queue.Event) bool {
		done := map[string]bool{}
		for _, ev := range es {
			if ev.Type == queue.EventOperationState && ev.State == queue.StateDone {
				done[ev.OperationID] = true
			}
		}
		return len(done) == len(ids)
	})
	e.d.Stop(t.Context())
	e.d.Stop(t.Context())
	if err := e.d.Start(t.Context()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}

	d2, err := New(Config{Store: e.store})
	if err != nil {
		t.Fatal(err)
	}
	d2.Stop(t.Context()) // before Start
	d2.Stop(t.Context())
	if err := d2.Start(t.Context()); !errors.Is(err, ErrNoTransport) {
		t.Fatalf("Start without transport: %v", err)
	}
}

// Stop lets sends in flight finish until its deadline, then cancels them
// and puts their operations back to pending.
func TestStopReleasesInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true})
	hold := make(chan struct{})
	defer close(hold)
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Hold, Hold: hold}
	})
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.create("n1", `{"v":1}`)
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool { return len(l) == 1 }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no grace: cancel at once
	e.d.Stop(ctx)
	op := e.wantState(c.Operation.ID, queue.StatePending)
	if op.AttemptCount != 1 || op.LeaseOwner != "" {
		t.Errorf("released op: attempts %d owner %q", op.AttemptCount, op.LeaseOwner)
	}
	if got := counter(t, e.d.Registry(), "offline_attempts_total", "result", transport.CodeCanceled); got != 1 {
		t.Errorf("canceled attempts %v", got)
	}
}

// The metrics handler serves the article's metric names.
func TestMetricsHandler(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.create("n1", `{"v":1}`)
	e.create("n2", `{"invalid":true}`)
	e.clock.Advance(90 * time.Second)
	e.create("n3", `{"v":1}`)
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(r.Path, "/note") && strings.Contains(string(r.Body), `"n3"`) {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 429, RetryAfter: "60"}
		}
		return faultproxy.Action{}
	})
	e.drain()
	rec := httptest.NewRecorder()
	e.d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`offline_queue_depth{state="done"} 1`,
		`offline_queue_depth{state="permanent_failed"} 1`,
		`offline_queue_depth{state="retry_waiting"} 1`,
		`offline_queue_depth{state="pending"} 0`,
		`offline_queue_oldest_age_seconds 90`,
		`offline_attempts_total{result="done"} 1`,
		`offline_attempts_total{result="rate_limited"} 1`,
		`offline_attempts_total{result="validation"} 1`,
		`offline_permanent_failures_total{code="validation"} 1`,
		`offline_attempt_duration_seconds_count 3`,
		`offline_batch_operations_count 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), "offline_pull_lag_seconds") {
		t.Errorf("pull lag before any read of the feed:\n%s", body)
	}
	// The lag counts from the last read of the feed without an error.
	e.d.pull.mu.Lock()
	e.d.pull.lastRead = e.clock.Now()
	e.d.pull.mu.Unlock()
	e.clock.Advance(42 * time.Second)
	rec = httptest.NewRecorder()
	e.d.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body, _ := io.ReadAll(rec.Body); !strings.Contains(string(body), "offline_pull_lag_seconds 42\n") {
		t.Errorf("metrics lack the pull lag of 42 s:\n%s", body)
	}
}

// A started daemon wakes for the earliest next_attempt_at by itself: no
// Notify after the retry is scheduled.
func TestWakesAtNextAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{
		Policy: transport.Policy{Backoff: transport.Backoff{Base: 20 * time.Millisecond, Max: 20 * time.Millisecond}},
	}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 503}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.events.wait(t, "retry then done", func(es []queue.Event) bool {
		waited, done := false, false
		for _, ev := range es {
			if ev.OperationID == c.Operation.ID && ev.Type == queue.EventOperationState {
				waited = waited || ev.State == queue.StateRetryWaiting
				done = done || ev.State == queue.StateDone
			}
		}
		return waited && done
	})
}

// No more than Concurrency operations are being sent at once.
func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Concurrency: 3}})
	hold := make(chan struct{})
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Hold, Hold: hold}
	})
	for i := range 10 {
		e.create("n"+strconv.Itoa(i), `{"v":1}`)
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.proxy.Wait(t.Context(), func(l []faultproxy.Entry) bool { return len(l) == 3 }); err != nil {
		t.Fatal(err)
	}
	st, _ := e.d.Status(t.Context())
	if st.Counts[queue.StateSending] != 3 || st.Counts[queue.StatePending] != 7 {
		t.Fatalf("counts %v with 3 sends held", st.Counts)
	}
	close(hold)
	e.events.wait(t, "all done", func(es []queue.Event) bool {
		n := 0
		for _, ev := range es {
			if ev.Type == queue.EventOperationState && ev.State == queue.StateDone {
				n++
			}
		}
		return n == 10
	})
}

// A write the server declined (400 validation) is fixed by the user: an
// update of the entity sends the create again at once with the fixed
// data under a new key, since the server answers the old key with the
// stored 400. The server ends with one record, holding the fixed data.
func TestDeclinedFixedByUpdate(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"invalid":true,"title":"x"}`)
	e.drain()
	failed := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if !failed.Declined {
		t.Fatalf("a 400 validation did not mark the operation declined: %+v", failed)
	}
	u := e.update("n1", `{"invalid":null}`)
	e.drain()
	done := e.wantState(c.Operation.ID, queue.StateDone)
	e.wantState(u.Operation.ID, queue.StateDone)
	if done.Key() == c.Operation.ID {
		t.Fatalf("the fixed create went under its old key")
	}
	if ent := e.entity("n1"); ent.SyncState != queue.SyncSynced {
		t.Fatalf("entity %s %q, want synced", ent.SyncState, ent.SyncError)
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"title":"x"}`)
	log := e.proxy.Log()
	if n := faultproxy.Count(log, keyed(c.Operation.ID)); n != 1 {
		t.Errorf("old key sent %d times, want 1", n)
	}
	if n := faultproxy.Count(log, keyed(done.Key())); n != 1 {
		t.Errorf("new key sent %d times, want 1", n)
	}
}

// The user deletes an entity the server declined instead of fixing it:
// the failure goes with it. A declined create leaves nothing to send; a
// declined update is dropped and the delete goes to the server.
func TestDeleteOverDeclined(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"invalid":true}`)
	e.create("n2", `{"v":1}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	u := e.update("n2", `{"invalid":true}`)
	e.drain()
	e.wantState(u.Operation.ID, queue.StatePermanentFailed)

	d1, d2 := e.del("n1"), e.del("n2")
	if d1.Operation.State != queue.StateDone || d2.Operation.State != queue.StatePending {
		t.Fatalf("deletes: %s, %s; want done (nothing to send), pending", d1.Operation.State, d2.Operation.State)
	}
	if n := e.drain(); n != 1 {
		t.Errorf("drained %d operations, want 1 (the delete of n2)", n)
	}
	e.wantState(d2.Operation.ID, queue.StateDone)
	for _, id := range []string{c.Operation.ID, u.Operation.ID} {
		if _, err := e.store.GetOperation(id); !errors.Is(err, queue.ErrOperationNotFound) {
			t.Errorf("declined operation %s: %v, want gone", id, err)
		}
	}
	if st, err := e.store.Stats(); err != nil || st.Counts[queue.StatePermanentFailed]+st.Counts[queue.StatePending] != 0 {
		t.Errorf("queue after the deletes: %+v, %v; want nothing failed or unsent", st.Counts, err)
	}
	if recs := e.serverRecords("n1"); len(recs) != 0 {
		t.Errorf("server holds %+v of n1, which it declined", recs)
	}
	if r := e.oneRecord("n2"); !r.Deleted {
		t.Errorf("server's n2 is live: %+v", r)
	}
	if n := faultproxy.Count(e.proxy.Log(), keyed(d1.Operation.ID)); n != 0 {
		t.Errorf("the delete of n1 was sent %d times", n)
	}
}

// An entity of a mergeable type edited many times while offline is sent
// once: each update supersedes the unsent one before it. The server ends
// with the last data, and every superseded operation says which
// operation carried it.
func TestMergeableUpdatesSentOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{mergeable: []string{"note"}})
	e.create("n1", `{"v":0}`)
	e.drain()
	var ups []queue.Result
	for i := 1; i <= 20; i++ {
		ups = append(ups, e.update("n1", fmt.Sprintf(`{"v":%d}`, i)))
	}
	d := e.create("n2", `{"v":0}`) // a create is never merged
	e.update("n2", `{"v":1}`)
	e.del("n2")
	if n := e.drain(); n != 3 {
		t.Errorf("drained %d operations, want 3 (n1's last update, n2's create and delete)", n)
	}
	last := ups[len(ups)-1].Operation.ID
	e.wantState(last, queue.StateDone)
	for _, u := range ups[:len(ups)-1] {
		op := e.wantState(u.Operation.ID, queue.StateDone)
		if op.AttemptCount != 0 || op.MergedInto == "" {
			t.Errorf("superseded update %s: %d attempts, mergedInto %q", op.ID, op.AttemptCount, op.MergedInto)
		}
		if n := faultproxy.Count(e.proxy.Log(), keyed(op.ID)); n != 0 {
			t.Errorf("superseded update %s sent %d times", op.ID, n)
		}
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"v":20}`)
	if r := e.oneRecord("n2"); !r.Deleted {
		t.Errorf("n2 on the server: %+v, want deleted", r)
	}
	e.wantState(d.Operation.ID, queue.StateDone)
}

// A delete the server refused, then discarded, brings the entity back;
// the updates made before it that never went (superseded by the delete,
// or refused and dropped by it) must not leave the entity "synced" with
// data the server does not hold: its data goes as an update.
func TestDiscardedDeleteSendsTheData(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{mergeable: []string{"note"}})
	e.create("n1", `{"v":1}`)
	e.create("n2", `{"v":1}`)
	e.drain()
	u2 := e.update("n2", `{"invalid":true}`)
	e.drain()
	e.wantState(u2.Operation.ID, queue.StatePermanentFailed)

	u1 := e.update("n1", `{"v":2}`) // superseded by the delete
	d1 := e.del("n1")
	d2 := e.del("n2") // drops the declined update
	forbid := respondWhile(e, 403)
	e.drain()
	forbid.Store(false)
	for _, d := range []queue.Result{d1, d2} {
		if op := e.wantState(d.Operation.ID, queue.StatePermanentFailed); !op.Declined {
			t.Fatalf("delete %s not declined", op.ID)
		}
		if err := e.store.Discard(context.Background(), d.Operation.ID); err != nil {
			t.Fatal(err)
		}
	}
	if op := e.op(u1.Operation.ID); op.MergedInto != d1.Operation.ID {
		t.Fatalf("update of n1: mergedInto %q, want the delete", op.MergedInto)
	}
	for _, id := range []string{"n1", "n2"} {
		if ent := e.entity(id); ent.SyncState != queue.SyncPending {
			t.Errorf("%s after the discard: %s, want pending (its data follows)", id, ent.SyncState)
		}
	}
	e.drain()
	if ent := e.entity("n1"); ent.SyncState != queue.SyncSynced {
		t.Errorf("n1: %s %q, want synced", ent.SyncState, ent.SyncError)
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"v":2}`)
	// n2's data is what the server refused: refused again, and shown.
	if ent := e.entity("n2"); ent.SyncState != queue.SyncFailed {
		t.Errorf("n2: %s, want failed", ent.SyncState)
	}
	jsonEq(t, e.oneRecord("n2").Data, `{"v":1}`)
}

// A 403 (the user lacked permission) is declined too: once the
// permission is fixed on the server, the user's retry goes under a new
// key instead of replaying the stored 403.
func TestDeclinedForbiddenRetried(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	forbid := respondWhile(e, 403)
	c := e.create("n1", `{"v":1}`)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.LastErrorCode != transport.CodeForbidden || !op.Declined {
		t.Fatalf("code %q declined=%v, want forbidden, declined", op.LastErrorCode, op.Declined)
	}
	forbid.Store(false)
	if _, err := e.store.Retry(context.Background(), c.Operation.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StateDone)
	if op.Key() == op.ID {
		t.Errorf("the retry went under the declined key")
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"v":1}`)
}

// respondWhile makes the proxy answer every request with status, without
// forwarding it, while the returned flag is set (it starts set).
func respondWhile(e *env, status int) *atomic.Bool {
	var on atomic.Bool
	on.Store(true)
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		if on.Load() {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: status}
		}
		return faultproxy.Action{}
	})
	return &on
}

// A user's retry after the operation gave up (retry_expired) gets a
// fresh deadline: one more temporary failure schedules a retry instead of
// failing it again at once.
func TestUserRetryRestartsDeadline(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{
		Policy: transport.Policy{MaxElapsed: 10 * time.Minute, Backoff: transport.Backoff{Base: time.Minute, Max: time.Minute}},
	}})
	down := respondWhile(e, 500) // may have been applied: the deadline holds
	c := e.create("n1", `{"v":1}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateRetryWaiting)
	e.clock.Advance(11 * time.Minute)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.LastErrorCode != CodeRetryExpired {
		t.Fatalf("code %q, want %s", op.LastErrorCode, CodeRetryExpired)
	}
	if _, err := e.store.Retry(context.Background(), c.Operation.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	e.wantState(c.Operation.ID, queue.StateRetryWaiting)
	down.Store(false)
	e.clock.Advance(2 * time.Minute)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
}

// MaxOperationAge also bounds retrying: set above the default, an
// operation failing for a week is still retried.
func TestMaxOperationAgeBoundsRetries(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{MaxOperationAge: 30 * 24 * time.Hour}})
	e.proxy.SetRule(func(faultproxy.Request) faultproxy.Action {
		return faultproxy.Action{Kind: faultproxy.Respond, Status: 503}
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	for range 7 * 24 {
		e.clock.Advance(time.Hour)
		e.drain()
	}
	e.wantState(c.Operation.ID, queue.StateRetryWaiting)
}

// Data at the size limit reaches the server whatever its characters:
// '<', '>' and '&' are not escaped on the way (six bytes each would not
// fit the server's body limit), and the server's reply, which carries the
// data back escaped, is read whole.
func TestDataAtTheLimitSyncs(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	data := `{"x":"` + strings.Repeat("<&>", (queue.DefaultMaxDataBytes-16)/3) + `"}`
	c := e.create("n1", data)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	var got struct{ X string }
	if err := json.Unmarshal(e.oneRecord("n1").Data, &got); err != nil || len(got.X) != len(data)-8 {
		t.Errorf("server holds %d characters of x (%v), want %d", len(got.X), err, len(data)-8)
	}
}

// An entity deleted and made again under the same local id ends live on
// the server with the new data: whether the delete had reached the
// server before the new create was made or not.
func TestRecreateAfterDelete(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.create("n1", `{"v":1}`)
	e.drain()
	e.del("n1")
	c := e.create("n1", `{"v":2}`) // the delete has not gone yet
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	rec := e.oneRecord("n1")
	if rec.Deleted {
		t.Fatalf("server record deleted after the re-create: %+v", rec)
	}
	jsonEq(t, rec.Data, `{"v":2}`)

	e.del("n1")
	e.drain() // the delete went; the local row is gone
	c = e.create("n1", `{"v":3}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	rec = e.oneRecord("n1")
	if rec.Deleted {
		t.Fatalf("server record deleted after the second re-create: %+v", rec)
	}
	jsonEq(t, rec.Data, `{"v":3}`)
	if ent := e.entity("n1"); ent.SyncState != queue.SyncSynced || ent.ServerID != rec.ID {
		t.Errorf("local entity %s server id %q, want synced %q", ent.SyncState, ent.ServerID, rec.ID)
	}
}

// A create of an id the server already holds with other data: an
// earlier create of it reached the server, its answer was lost, it
// expired and the user discarded it; then the app made the entity again.
// The server answers the new create with its old record (200). The
// daemon sends the entity's data after it as an update, so the server
// does not keep the discarded data while the entity reads as synced.
func TestCreateAnsweredWithOtherData(t *testing.T) {
	t.Parallel()
	// Record-level (lww): a merging server would merge the create into
	// the record the discarded one left, or refuse it on "v".
	e := setup(t, envOpts{cfg: Config{Policy: transport.Policy{MaxElapsed: 30 * 24 * time.Hour}},
		remoteCfg: remote.Config{Conflicts: map[string]remote.Policy{"*": remote.PolicyLWW}}})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if strings.Contains(string(r.Body), `"old"`) {
			return faultproxy.Action{Kind: faultproxy.DropResponse}
		}
		return faultproxy.Action{}
	})
	old := e.create("n1", `{"v":"old","extra":1}`)
	e.drain()
	e.wantState(old.Operation.ID, queue.StateRetryWaiting)
	e.clock.Advance(DefaultMaxOperationAge + time.Hour)
	e.drain()
	if op := e.wantState(old.Operation.ID, queue.StatePermanentFailed); op.LastErrorCode != CodeOperationExpired {
		t.Fatalf("code %q, want %s", op.LastErrorCode, CodeOperationExpired)
	}
	if err := e.store.Discard(context.Background(), old.Operation.ID); err != nil {
		t.Fatal(err)
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"v":"old","extra":1}`)

	c := e.create("n1", `{"v":"new"}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	rec := e.oneRecord("n1")
	jsonEq(t, rec.Data, `{"v":"new"}`)
	ent := e.entity("n1")
	if ent.SyncState != queue.SyncSynced || ent.ServerID != rec.ID || ent.LastOperationID == c.Operation.ID {
		t.Fatalf("entity %+v after the create and its follow-up, server record %+v", ent, rec)
	}
	if up := e.wantState(ent.LastOperationID, queue.StateDone); up.Type != queue.OpUpdate || up.PayloadVersion != rec.PayloadVersion {
		t.Errorf("follow-up %+v", up)
	}
	if ent.SyncedOperationID != ent.LastOperationID {
		t.Errorf("syncedOperationId %q, want the follow-up %q", ent.SyncedOperationID, ent.LastOperationID)
	}

	// A create the server makes anew (201), or answers with the data it
	// sent, is not followed up.
	c2 := e.create("n2", `{"v":1}`)
	e.drain()
	if ent := e.entity("n2"); ent.LastOperationID != c2.Operation.ID || ent.SyncState != queue.SyncSynced {
		t.Errorf("n2 %+v", ent)
	}
}

// An entity deleted and made again while the delete failed (403): the
// create supersedes the refused delete, which never reached the server
// and goes unsent (an operation.purged event tells it), and goes as an
// update, since the server still holds the record live and would
// answer a create with its old data. (Before issue 25 the create waited
// behind the failed delete, and the entity stayed failed until the user
// discarded the delete.)
func TestRecreateSupersedesDeclinedDelete(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.create("n1", `{"v":1}`)
	e.drain()
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Method == "DELETE" {
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 403}
		}
		return faultproxy.Action{}
	})
	del := e.del("n1")
	e.drain()
	if op := e.wantState(del.Operation.ID, queue.StatePermanentFailed); !op.Declined {
		t.Fatalf("a 403 on delete was not declined: %+v", op)
	}
	c := e.create("n1", `{"v":2}`)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StateDone); op.Type != queue.OpUpdate {
		t.Errorf("the create over the refused delete went as %s", op.Type)
	}
	if _, err := e.store.GetOperation(del.Operation.ID); !errors.Is(err, queue.ErrOperationNotFound) {
		t.Errorf("the refused delete: %v", err)
	}
	e.events.wait(t, "the delete's purge", func(es []queue.Event) bool {
		for _, ev := range es {
			if ev.Type == queue.EventOperationPurged && ev.OperationID == del.Operation.ID {
				return true
			}
		}
		return false
	})
	rec := e.oneRecord("n1")
	if rec.Deleted {
		t.Fatalf("server record deleted: %+v", rec)
	}
	jsonEq(t, rec.Data, `{"v":2}`)
	if n := faultproxy.Count(e.proxy.Log(), func(en faultproxy.Entry) bool { return en.Method == "DELETE" }); n != 1 {
		t.Errorf("the refused delete was sent %d times, want 1", n)
	}
	if ent := e.entity("n1"); ent.SyncState != queue.SyncSynced {
		t.Errorf("entity %s", ent.SyncState)
	}
}

// A 4xx after an attempt whose answer was lost is no proof that the
// operation was not applied (the first attempt reached the server; the
// 403 came from in front of it). The operation fails but is not taken as
// declined: an update does not renew it, and the user's retry keeps its
// key, which the server answers with the stored 201.
func TestNoDeclineAfterLostAnswer(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		switch r.KeySeen {
		case 1:
			return faultproxy.Action{Kind: faultproxy.DropResponse} // committed, answer lost
		case 2:
			return faultproxy.Action{Kind: faultproxy.Respond, Status: 403}
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StateRetryWaiting); !op.MaybeApplied {
		t.Fatalf("a lost answer did not mark the op maybe applied: %+v", op)
	}
	e.clock.Advance(time.Hour)
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.Declined || op.LastErrorCode != transport.CodeForbidden {
		t.Fatalf("after the 403: declined=%v code %s, want a plain forbidden failure", op.Declined, op.LastErrorCode)
	}
	e.update("n1", `{"v":2}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if _, err := e.store.Retry(context.Background(), c.Operation.ID); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if op := e.wantState(c.Operation.ID, queue.StateDone); op.Key() != op.ID {
		t.Errorf("the retry went under a new key %q", op.Key())
	}
	if n := faultproxy.Count(e.proxy.Log(), keyed(c.Operation.ID)); n != 3 {
		t.Errorf("the create's key was sent %d times, want 3", n)
	}
	jsonEq(t, e.oneRecord("n1").Data, `{"v":2}`)
}

// net/http resends a request with an Idempotency-Key by itself when a
// kept-alive connection dies before any answer. When the first write was
// applied and its answer lost, the refusal of the second within the same
// Send proves nothing: not declined.
func TestNoDeclineAfterResendInOneSend(t *testing.T) {
	t.Parallel()
	var sends atomic.Int64
	e := setup(t, envOpts{cfg: Config{TestHookAfterResponse: func(op queue.Operation, o transport.Outcome) {
		if op.EntityID == "n1" {
			sends.Store(int64(o.Sends))
		}
	}}})
	e.create("n0", `{"v":0}`) // a kept-alive connection for n1's first write
	e.drain()
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if !strings.Contains(string(r.Body), `"n1"`) {
			return faultproxy.Action{}
		}
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.DropResponse} // applied, answer lost
		}
		return faultproxy.Action{Kind: faultproxy.Respond, Status: 403}
	})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	if n := sends.Load(); n != 2 {
		t.Fatalf("the send wrote the request %d times, want 2 (net/http's resend on a new connection)", n)
	}
	op := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if op.Declined || !op.MaybeApplied {
		t.Fatalf("declined=%v maybeApplied=%v after an applied write and a 403 in one send", op.Declined, op.MaybeApplied)
	}
}

// Giving up after a lost answer, and a reply that is a 2xx the daemon
// cannot take as done, both leave the op maybe applied: a refusal after
// the user's retry is then not taken as declined.
func TestFailKeepsMaybeApplied(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]faultproxy.Action{
		"gave up after a lost answer": {Kind: faultproxy.DropResponse},
		"201 without a server id":     {Kind: faultproxy.Respond, Status: 201},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{cfg: Config{Policy: transport.Policy{MaxElapsed: time.Minute, Backoff: transport.Backoff{Base: time.Hour}}}})
			e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
				if r.KeySeen == 1 {
					return first
				}
				return faultproxy.Action{Kind: faultproxy.Respond, Status: 403}
			})
			c := e.create("n1", `{"v":1}`)
			e.drain()
			if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); !op.MaybeApplied {
				t.Fatalf("failed (%s) without maybeApplied", op.LastErrorCode)
			}
			if _, err := e.store.Retry(context.Background(), c.Operation.ID); err != nil {
				t.Fatal(err)
			}
			e.drain()
			if op := e.wantState(c.Operation.ID, queue.StatePermanentFailed); op.Declined || op.Key() != op.ID {
				t.Fatalf("a 403 after a maybe applied attempt: declined=%v key %q", op.Declined, op.Key())
			}
		})
	}
}

// A refusal replayed by the server's idempotency record is the answer of
// the key's only execution: declined, even after an attempt whose answer
// was lost.
func TestReplayedRefusalDeclines(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.KeySeen == 1 {
			return faultproxy.Action{Kind: faultproxy.DropResponse} // the server refused; the answer is lost
		}
		return faultproxy.Action{}
	})
	c := e.create("n1", `{"invalid":true}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateRetryWaiting)
	e.clock.Advance(time.Hour)
	e.drain()
	op := e.wantState(c.Operation.ID, queue.StatePermanentFailed)
	if !op.Declined || op.LastErrorCode != transport.CodeValidation {
		t.Fatalf("a replayed 400: declined=%v code %s, want declined validation", op.Declined, op.LastErrorCode)
	}
	e.update("n1", `{"invalid":null}`)
	e.drain()
	e.wantState(c.Operation.ID, queue.StateDone)
	jsonEq(t, e.oneRecord("n1").Data, `{}`)
}

// Discarding an update the server refused brings the entity back to the
// data the server holds, so "synced" tells the truth.
func TestDiscardUpdateRevertsToSynced(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{})
	c := e.create("n1", `{"v":1}`)
	e.drain()
	u := e.update("n1", `{"v":2,"invalid":true}`)
	e.drain()
	e.wantState(u.Operation.ID, queue.StatePermanentFailed)
	if ent := e.entity("n1"); ent.SyncedOperationID != c.Operation.ID {
		t.Fatalf("syncedOperationId %q, want the create %q", ent.SyncedOperationID, c.Operation.ID)
	}
	if err := e.store.Discard(context.Background(), u.Operation.ID); err != nil {
		t.Fatal(err)
	}
	ent := e.entity("n1")
	if ent.SyncState != queue.SyncSynced {
		t.Fatalf("entity %s after the discard", ent.SyncState)
	}
	jsonEq(t, ent.Data, `{"v":1}`)
	jsonEq(t, e.oneRecord("n1").Data, `{"v":1}`)
}
