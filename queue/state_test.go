package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Every pair of states: legal exactly when the design's table says so.
func TestStateMachineTable(t *testing.T) {
	t.Parallel()
	legal := map[[2]State]bool{
		{StatePending, StateSending}:         true,
		{StateSending, StateDone}:            true,
		{StateSending, StateRetryWaiting}:    true,
		{StateSending, StatePermanentFailed}: true,
		{StateSending, StatePending}:         true,
		{StateRetryWaiting, StatePending}:    true,
		{StatePermanentFailed, StatePending}: true,
	}
	for _, from := range States {
		for _, to := range States {
			op := &Operation{ID: "x", State: from}
			err := op.transition(to)
			if want := legal[[2]State{from, to}]; want != (err == nil) {
				t.Errorf("%s -> %s: err = %v, legal = %v", from, to, err, want)
			}
			var te *TransitionError
			if err != nil && (!errors.As(err, &te) || !errors.Is(err, ErrIllegalTransition) || te.From != from || te.To != to) {
				t.Errorf("%s -> %s: error %v is not a TransitionError", from, to, err)
			}
		}
	}
	if _, err := ParseState("bogus"); err == nil {
		t.Error("ParseState accepted an unknown state")
	}
}

// The store's methods drive each legal transition and refuse the rest.
func TestStoreTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lease = time.Minute

	type step func(s *Store, c *fakeClock, id string) error
	claim := func(s *Store, c *fakeClock, id string) error {
		op, err := s.Claim(ctx, "acct", "w1", lease)
		if err == nil && op.ID != id {
			t.Fatalf("claimed %s, want %s", op.ID, id)
		}
		return err
	}
	complete := func(s *Store, c *fakeClock, id string) error {
		_, err := s.Complete(ctx, id, "w1", Completion{ServerID: "srv-1"})
		return err
	}
	retryAt := func(s *Store, c *fakeClock, id string) error {
		return s.RetryAt(ctx, id, "w1", c.Now().Add(time.Second), "network", "reset", true)
	}
	fail := func(s *Store, c *fakeClock, id string) error {
		return s.Fail(ctx, id, "w1", "validation", "bad value", false)
	}
	release := func(s *Store, c *fakeClock, id string) error { return s.Release(ctx, id, "w1", false) }
	userRetry := func(s *Store, c *fakeClock, id string) error { _, err := s.Retry(ctx, id); return err }
	discard := func(s *Store, c *fakeClock, id string) error { return s.Discard(ctx, id) }

	tests := []struct {
		name    string
		prepare []step // legal steps that bring the op to a state
		act     step
		want    State // state after act, when legal
		illegal bool
	}{
		{name: "pending->sending", act: claim, want: StateSending},
		{name: "sending->done", prepare: []step{claim}, act: complete, want: StateDone},
		{name: "sending->retry_waiting", prepare: []step{claim}, act: retryAt, want: StateRetryWaiting},
		{name: "sending->permanent_failed", prepare: []step{claim}, act: fail, want: StatePermanentFailed},
		{name: "sending->pending (release)", prepare: []step{claim}, act: release, want: StatePending},
		{name: "permanent_failed->pending (user retry)", prepare: []step{claim, fail}, act: userRetry, want: StatePending},
		{name: "pending->done", act: complete, illegal: true},
		{name: "pending->retry_waiting", act: retryAt, illegal: true},
		{name: "pending->permanent_failed", act: fail, illegal: true},
		{name: "pending user retry", act: userRetry, illegal: true},
		{name: "pending discard", act: discard, illegal: true},
		{name: "done->sending (release)", prepare: []step{claim, complete}, act: release, illegal: true},
		{name: "done->retry_waiting", prepare: []step{claim, complete}, act: retryAt, illegal: true},
		{name: "done->permanent_failed", prepare: []step{claim, complete}, act: fail, illegal: true},
		{name: "done user retry", prepare: []step{claim, complete}, act: userRetry, illegal: true},
		{name: "retry_waiting->done", prepare: []step{claim, retryAt}, act: complete, illegal: true},
		{name: "retry_waiting->permanent_failed", prepare: []step{claim, retryAt}, act: fail, illegal: true},
		{name: "retry_waiting user retry", prepare: []step{claim, retryAt}, act: userRetry, illegal: true},
		{name: "permanent_failed->done", prepare: []step{claim, fail}, act: complete, illegal: true},
		{name: "permanent_failed->retry_waiting", prepare: []step{claim, fail}, act: retryAt, illegal: true},
		{name: "permanent_failed->sending (release)", prepare: []step{claim, fail}, act: release, illegal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := setup(t, Config{NoSync: true})
			id := create(t, s, "n1", `{"v":1}`).Operation.ID
			for _, p := range tt.prepare {
				if err := p(s, c, id); err != nil {
					t.Fatalf("prepare: %v", err)
				}
			}
			before, _ := s.GetOperation(id)
			err := tt.act(s, c, id)
			after, _ := s.GetOperation(id)
			if tt.illegal {
				if !errors.Is(err, ErrIllegalTransition) {
					t.Fatalf("err = %v, want an illegal transition", err)
				}
				if after.State != before.State || after.AttemptCount != before.AttemptCount {
					t.Fatalf("illegal step changed the op: %+v -> %+v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if after.State != tt.want {
				t.Fatalf("state = %s, want %s", after.State, tt.want)
			}
		})
	}
}

// retry_waiting -> pending happens when next_attempt_at comes: a claim
// before it finds nothing, after it finds the op.
func TestRetryWaitingBecomesReadyAtNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := setup(t, Config{NoSync: true})
	id := create(t, s, "n1", `{}`).Operation.ID
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.RetryAt(ctx, id, "w", c.Now().Add(10*time.Second), "server_error", "503", false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim before next_attempt_at: %v", err)
	}
	at, ok, err := s.NextWake("acct")
	if err != nil || !ok || !at.Equal(c.Now().Add(10*time.Second)) {
		t.Fatalf("NextWake = %v %v %v", at, ok, err)
	}
	c.Advance(10 * time.Second)
	op, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil || op.ID != id || op.AttemptCount != 2 {
		t.Fatalf("claim at next_attempt_at: %+v %v", op, err)
	}
}

// A worker whose lease expired loses it: the next claim takes the op over;
// the old worker's retry is refused, its completion accepted (the server's
// answer is the same for both attempts).
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := setup(t, Config{NoSync: true})
	id := create(t, s, "n1", `{}`).Operation.ID
	if _, err := s.Claim(ctx, "acct", "w1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "acct", "w2", 30*time.Second); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim of a leased op: %v", err)
	}
	c.Advance(29 * time.Second)
	if _, err := s.Claim(ctx, "acct", "w2", 30*time.Second); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim before expiry: %v", err)
	}
	c.Advance(time.Second)
	op, err := s.Claim(ctx, "acct", "w2", 30*time.Second)
	if err != nil || op.ID != id || op.LeaseOwner != "w2" || op.AttemptCount != 2 {
		t.Fatalf("claim after expiry: %+v, %v", op, err)
	}
	if err := s.RetryAt(ctx, id, "w1", c.Now(), "x", "y", false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old owner's retry: %v", err)
	}
	if err := s.Fail(ctx, id, "w1", "x", "y", false); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old owner's fail: %v", err)
	}
	if _, err := s.Complete(ctx, id, "w1", Completion{ServerID: "s1"}); err != nil {
		t.Fatalf("old owner's completion: %v", err)
	}
	// The new owner's completion of the same answer is a harmless redo.
	if _, err := s.Complete(ctx, id, "w2", Completion{ServerID: "s1"}); err != nil {
		t.Fatalf("redo completion: %v", err)
	}
	e, err := s.GetEntity("acct", "note", "n1")
	if err != nil || e.SyncState != SyncSynced || e.ServerID != "s1" {
		t.Fatalf("entity = %+v, %v", e, err)
	}
}

// A process that dies with an op sending leaves it pending for the next.
func TestRestartRecoversSending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newClock()
	path := t.TempDir() + "/syncd.db"
	s, err := Open(path, Config{Now: clock.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	id := create(t, s, "n1", `{}`).Operation.ID
	if _, err := s.Claim(ctx, "acct", "w1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var events []Event
	s, err = Open(path, Config{Now: clock.Now, NoSync: true, OnCommit: func(e []Event) { events = append(events, e...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op, err := s.GetOperation(id)
	if err != nil || op.State != StatePending || op.LeaseOwner != "" || op.AttemptCount != 1 {
		t.Fatalf("after restart: %+v, %v", op, err)
	}
	if len(events) != 1 || events[0].State != StatePending {
		t.Fatalf("recovery events = %+v", events)
	}
	// Ready at once, not after the hour-long lease.
	if op, err := s.Claim(ctx, "acct", "w2", time.Minute); err != nil || op.ID != id {
		t.Fatalf("claim after restart: %+v, %v", op, err)
	}
	mustCheck(t, s)
}

func TestCompleteAndClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	a := create(t, s, "a", `{}`).Operation
	b := create(t, s, "b", `{}`).Operation
	if _, err := s.Claim(ctx, "acct", "w1", time.Minute); err != nil {
		t.Fatal(err)
	}
	done, next, ok, err := s.CompleteAndClaim(ctx, a.ID, "w1", Completion{ServerID: "sa"}, "acct", "w2", time.Minute)
	if err != nil || done.State != StateDone || !ok || next.ID != b.ID || next.LeaseOwner != "w2" || next.State != StateSending {
		t.Fatalf("CompleteAndClaim = %+v, %+v, %v, %v", done, next, ok, err)
	}
	done, _, ok, err = s.CompleteAndClaim(ctx, b.ID, "w2", Completion{}, "acct", "w3", time.Minute)
	if err != nil || done.State != StateDone || ok {
		t.Fatalf("last CompleteAndClaim = %+v, %v, %v", done, ok, err)
	}
	// An illegal completion claims nothing.
	c := create(t, s, "c", `{}`).Operation
	if _, _, ok, err := s.CompleteAndClaim(ctx, c.ID, "w", Completion{}, "acct", "w4", time.Minute); !errors.Is(err, ErrIllegalTransition) || ok {
		t.Fatalf("completing a pending op: %v, claimed %v", err, ok)
	}
	if op, _ := s.GetOperation(c.ID); op.State != StatePending {
		t.Fatalf("op c = %s", op.State)
	}
}

// A batch that writes nothing (a claim that finds nothing) is rolled
// back: the file's transaction id does not move.
func TestEmptyClaimCommitsNothing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, Config{NoSync: true})
	txid := func() int {
		tx, err := s.DB().Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return tx.ID()
	}
	before := txid()
	if _, err := s.Claim(context.Background(), "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatal(err)
	}
	if after := txid(); after != before {
		t.Fatalf("an empty claim committed a transaction: txid %d -> %d", before, after)
	}
}
