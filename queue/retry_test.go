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
		if err := s.RetryAt(ctx, op.ID, "w", clock.Now().Add(5*time.Minute), code, "x"); err != nil {
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
		{s.Release, 1},
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
