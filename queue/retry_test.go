package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// RetryNow brings forward the account's heads that wait after one of the
// given error codes, and nothing else.
func TestRetryNow(t *testing.T) {
	s, clock := setup(t, Config{NoSync: true})
	ctx := context.Background()
	wait := func(account, id, code string) string {
		t.Helper()
		r := mustApply(t, s, Write{Op: OpCreate, AccountID: account, EntityID: id, Data: json.RawMessage(`{}`)})
		op, err := s.Claim(ctx, account, "w", time.Minute)
		if err != nil || op.ID != r.Operation.ID {
			t.Fatalf("claim %s: %v, %v", id, op.ID, err)
		}
		if err := s.RetryAt(ctx, op.ID, "w", clock.Now().Add(5*time.Minute), code, "x", false); err != nil {
			t.Fatal(err)
		}
		return op.ID
	}
	network := wait("acct", "a", "network")
	timeout := wait("acct", "b", "timeout")
	limited := wait("acct", "c", "rate_limited") // waits out a Retry-After
	other := wait("other", "d", "network")       // another account
	pending := create(t, s, "e", `{}`).Operation.ID

	n, err := s.RetryNow(ctx, "acct", "network", "timeout")
	if err != nil || n != 2 {
		t.Fatalf("RetryNow: %d, %v; want 2 moved", n, err)
	}
	now := clock.Now()
	for id, want := range map[string]time.Time{
		network: now, timeout: now, pending: now,
		limited: now.Add(5 * time.Minute), other: now.Add(5 * time.Minute),
	} {
		op, err := s.GetOperation(id)
		if err != nil {
			t.Fatal(err)
		}
		if !op.NextAttemptAt.Equal(want) {
			t.Errorf("%s (%s): next attempt %v, want %v", id, op.LastErrorCode, op.NextAttemptAt, want)
		}
	}
	// The moved heads are claimable now, in seq order; the rest are not.
	var claimed []string
	for {
		op, err := s.Claim(ctx, "acct", "w2", time.Minute)
		if err != nil {
			break
		}
		claimed = append(claimed, op.ID)
	}
	if fmt.Sprint(claimed) != fmt.Sprint([]string{network, timeout, pending}) {
		t.Errorf("claimed %v, want %v", claimed, []string{network, timeout, pending})
	}
	if n, err := s.RetryNow(ctx, "acct", "network"); n != 0 || err != nil {
		t.Errorf("second RetryNow: %d, %v; want 0", n, err)
	}
	mustCheck(t, s)
}

// Release keeps the claim's attempt (the request may have arrived);
// ReleaseUnsent takes it back.
func TestReleaseUnsent(t *testing.T) {
	s, _ := setup(t, Config{NoSync: true})
	ctx := context.Background()
	id := create(t, s, "a", `{}`).Operation.ID
	for _, tc := range []struct {
		release func(ctx context.Context, id, owner string) error
		want    int
	}{
		{s.ReleaseUnsent, 0},
		{func(ctx context.Context, id, owner string) error { return s.Release(ctx, id, owner, false) }, 1},
		{s.ReleaseUnsent, 1},
	} {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.ID != id {
			t.Fatalf("claim: %v, %v", op.ID, err)
		}
		if err := tc.release(ctx, id, "w"); err != nil {
			t.Fatal(err)
		}
		if op, _ := s.GetOperation(id); op.State != StatePending || op.AttemptCount != tc.want {
			t.Fatalf("after release: %s, %d attempts; want pending, %d", op.State, op.AttemptCount, tc.want)
		}
	}
	if err := s.ReleaseUnsent(ctx, id, "w"); !errors.Is(err, ErrIllegalTransition) && !errors.As(err, new(*TransitionError)) {
		t.Fatalf("release of a pending op: %v, want a transition error", err)
	}
	mustCheck(t, s)
}

// A declined operation is a new attempt when the user retries it or
// updates its entity: the entity's current data under a new key. One the
// server did not decline keeps its key and payload.
func TestDeclinedRenews(t *testing.T) {
	s, _ := setup(t, Config{NoSync: true})
	ctx := context.Background()
	failHead := func(id string, decline bool) Operation {
		t.Helper()
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil || op.EntityID != id {
			t.Fatalf("claim: %s, %v; want the head of %s", op.EntityID, err, id)
		}
		fail := func(ctx context.Context, id, owner, code, msg string) error {
			return s.Fail(ctx, id, owner, code, msg, false)
		}
		if decline {
			fail = s.Decline
		}
		if err := fail(ctx, op.ID, "w", "validation", "title is too long"); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetOperation(op.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != StatePermanentFailed || got.Declined != decline || got.Key() != op.Key() {
			t.Fatalf("after fail: %s declined=%v key %q; want permanent_failed declined=%v key %q", got.State, got.Declined, got.Key(), decline, op.Key())
		}
		return got
	}
	entity := func(id string) Entity {
		t.Helper()
		e, err := s.EntityRow("acct", "note", id)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	// Declined create, then an update that fixes the data: the create goes
	// again at once with the fixed data and a new key; the update waits
	// behind it.
	c := create(t, s, "a", `{"title":"far too long","n":1}`)
	failHead("a", true)
	u := mustApply(t, s, Write{Op: OpUpdate, EntityID: "a", Data: json.RawMessage(`{"title":"ok"}`)})
	if u.Entity.SyncState != SyncPending {
		t.Errorf("entity after the fix is %s, want pending", u.Entity.SyncState)
	}
	head, err := s.GetOperation(c.Operation.ID)
	if err != nil {
		t.Fatal(err)
	}
	if head.State != StatePending || head.Declined || head.RemoteKey == "" || head.Key() == head.ID || head.UserRetriedAt.IsZero() {
		t.Fatalf("renewed head: %s declined=%v key %q (id %q) retried %v", head.State, head.Declined, head.Key(), head.ID, head.UserRetriedAt)
	}
	if string(head.Payload) != `{"n":1,"title":"ok"}` || head.PayloadVersion != 2 || head.PayloadFingerprint != payloadFingerprint(&head) || head.PayloadFingerprint == c.Operation.PayloadFingerprint {
		t.Errorf("renewed head payload %s v%d fingerprint %s", head.Payload, head.PayloadVersion, head.PayloadFingerprint)
	}
	if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != c.Operation.ID {
		t.Fatalf("claim after the fix: %s, %v; want the renewed create", op.ID, err)
	}
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); !errors.Is(err, ErrNoReady) {
		t.Fatalf("the update was claimable beside its head: %v", err)
	}
	if _, err := s.Complete(ctx, c.Operation.ID, "w", Completion{ServerID: "srv-a"}); err != nil {
		t.Fatal(err)
	}
	if op, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil || op.ID != u.Operation.ID || op.Key() != op.ID {
		t.Fatalf("claim after the create: %s key %q, %v; want the update with its own key", op.ID, op.Key(), err)
	}
	if _, err := s.Complete(ctx, u.Operation.ID, "w", Completion{}); err != nil {
		t.Fatal(err)
	}
	if e := entity("a"); e.SyncState != SyncSynced {
		t.Errorf("entity a is %s, want synced", e.SyncState)
	}

	// An edit queued while the create was on its way, then the decline,
	// then the user's retry: the retry takes the edit's data and a new
	// key. Declined again and retried again, it gets another key.
	c = create(t, s, "b", `{"v":1}`)
	mustApply(t, s, Write{Op: OpUpdate, EntityID: "b", Data: json.RawMessage(`{"v":2}`)})
	failHead("b", true)
	r, err := s.Retry(ctx, c.Operation.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != StatePending || r.Key() == r.ID || string(r.Payload) != `{"v":2}` {
		t.Errorf("retried: %s key %q payload %s", r.State, r.Key(), r.Payload)
	}
	if e := entity("b"); e.SyncState != SyncPending {
		t.Errorf("entity b is %s after the retry, want pending", e.SyncState)
	}
	failHead("b", true)
	r2, err := s.Retry(ctx, c.Operation.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Key() == r.Key() || r2.Key() == r2.ID {
		t.Errorf("second retry kept key %q", r2.Key())
	}

	// Not declined (the server may hold its effect): an update leaves it
	// failed, and the retry keeps its key and payload.
	s2, _ := setup(t, Config{NoSync: true})
	s = s2
	c = create(t, s, "c", `{"v":1}`)
	failHead("c", false)
	u = mustApply(t, s, Write{Op: OpUpdate, EntityID: "c", Data: json.RawMessage(`{"v":2}`)})
	if u.Entity.SyncState != SyncFailed {
		t.Errorf("entity c is %s after an update behind a failed head, want failed", u.Entity.SyncState)
	}
	if op, _ := s.GetOperation(c.Operation.ID); op.State != StatePermanentFailed {
		t.Errorf("head of c is %s after the update, want permanent_failed", op.State)
	}
	r, err = s.Retry(ctx, c.Operation.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key() != r.ID || r.RemoteKey != "" || string(r.Payload) != `{"v":1}` || r.PayloadFingerprint != c.Operation.PayloadFingerprint {
		t.Errorf("retry of a failure that was not declined: key %q payload %s", r.Key(), r.Payload)
	}
}
