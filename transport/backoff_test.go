package transport

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBackoffCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: time.Second, Max: time.Minute}
	for attempt, want := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60} {
		if got := b.Cap(attempt); got != want*time.Second {
			t.Errorf("Cap(%d) = %v, want %v", attempt, got, want*time.Second)
		}
	}
	if got := b.Cap(-3); got != time.Second {
		t.Errorf("Cap(-3) = %v", got)
	}
	for _, attempt := range []int{62, 63, 64, 1000, math.MaxInt} {
		if got := b.Cap(attempt); got != time.Minute {
			t.Errorf("Cap(%d) = %v, want the max", attempt, got)
		}
	}
	if got := (Backoff{}).Cap(0); got != DefaultBackoffBase {
		t.Errorf("zero Backoff Cap(0) = %v", got)
	}
	if got := (Backoff{}).Cap(100); got != DefaultBackoffMax {
		t.Errorf("zero Backoff Cap(100) = %v", got)
	}
	huge := Backoff{Base: 1, Max: math.MaxInt64}
	if got := huge.Cap(62); got != 1<<62 {
		t.Errorf("Cap(62) = %v, want 2^62ns", got)
	}
	if got := huge.Cap(63); got != math.MaxInt64 {
		t.Errorf("Cap(63) = %v, want MaxInt64", got)
	}
}

// TestBackoffBoundsProperty: 0 <= Next <= min(Max, Base*2^attempt), for
// any configuration and attempt, and it never overflows.
func TestBackoffBoundsProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		b := Backoff{
			Base: time.Duration(rapid.Int64Range(0, math.MaxInt64).Draw(t, "base")),
			Max:  time.Duration(rapid.Int64Range(0, math.MaxInt64).Draw(t, "max")),
		}
		attempt := rapid.IntRange(-5, 200).Draw(t, "attempt")
		seed := rapid.Uint64().Draw(t, "seed")
		d := b.Next(attempt, rand.New(rand.NewPCG(seed, 1)).Int64N)

		base := b.Base
		if base == 0 {
			base = DefaultBackoffBase
		}
		ceil := b.Max
		if ceil == 0 {
			ceil = DefaultBackoffMax
		}
		// The cap computed with big-enough arithmetic.
		want := ceil
		if n := max(attempt, 0); n < 63 && float64(base)*math.Pow(2, float64(n)) < float64(ceil) {
			want = base << n
		}
		if c := b.Cap(attempt); c != want {
			t.Fatalf("Cap(%d) = %v, want %v", attempt, c, want)
		}
		if d < 0 || d > want {
			t.Fatalf("Next(%d) = %v, outside [0, %v]", attempt, d, want)
		}
	})
}

// TestBackoffJitter checks with a seeded generator that delays spread over
// the whole range (full jitter), not only near the cap.
func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 4000
	c := b.Cap(4) // 1.6s
	var low, high int
	seen := map[time.Duration]bool{}
	for range n {
		d := b.Next(4, r.Int64N)
		if d < 0 || d > c {
			t.Fatalf("Next = %v outside [0, %v]", d, c)
		}
		if d < c/4 {
			low++
		}
		if d > c*3/4 {
			high++
		}
		seen[d] = true
	}
	// Uniform: about a quarter in each outer quarter.
	if low < n/5 || high < n/5 {
		t.Errorf("low quarter %d, high quarter %d of %d: not uniform", low, high, n)
	}
	if len(seen) < n*9/10 {
		t.Errorf("only %d distinct delays of %d", len(seen), n)
	}
	// The same seed gives the same delays.
	r1, r2 := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for i := range 10 {
		if a, b2 := b.Next(i, r1.Int64N), b.Next(i, r2.Int64N); a != b2 {
			t.Fatalf("attempt %d: %v != %v with the same seed", i, a, b2)
		}
	}
	// Bounds are reachable: rnd returning its extremes.
	if d := b.Next(4, func(int64) int64 { return 0 }); d != 0 {
		t.Errorf("min = %v", d)
	}
	if d := b.Next(4, func(n int64) int64 { return n - 1 }); d != c {
		t.Errorf("max = %v, want %v", d, c)
	}
	if d := (Backoff{}).Next(0, nil); d < 0 || d > DefaultBackoffBase {
		t.Errorf("default rnd: %v", d)
	}
}

func TestPolicyNext(t *testing.T) {
	t.Parallel()
	created := clock
	now := clock.Add(time.Hour)
	maxRnd := func(n int64) int64 { return n - 1 } // the jitter picks the cap
	zeroRnd := func(int64) int64 { return 0 }      // the jitter picks 0
	p := Policy{Backoff: Backoff{Base: time.Second, Max: time.Minute}, MaxElapsed: 2 * time.Hour, MaxRetryAfter: 10 * time.Minute}

	tests := []struct {
		name    string
		o       Outcome
		attempt int
		now     time.Time
		rnd     func(int64) int64
		wantAt  time.Time
		giveUp  bool
		code    string
	}{
		{"network: backoff", Outcome{Decision: Retry, Code: CodeNetwork}, 3, now, maxRnd, now.Add(8 * time.Second), false, CodeNetwork},
		{"network: jitter to zero", Outcome{Decision: Retry, Code: CodeNetwork}, 3, now, zeroRnd, now, false, CodeNetwork},
		{"429: Retry-After is a floor", Outcome{Decision: Retry, Code: CodeRateLimited, RetryAfter: 30 * time.Second}, 0, now, zeroRnd, now.Add(30 * time.Second), false, CodeRateLimited},
		{"429: backoff longer than Retry-After", Outcome{Decision: Retry, Code: CodeRateLimited, RetryAfter: 30 * time.Second}, 10, now, maxRnd, now.Add(time.Minute), false, CodeRateLimited},
		{"503: Retry-After capped", Outcome{Decision: Retry, Code: CodeUnavailable, RetryAfter: 1000 * time.Hour}, 0, now, zeroRnd, now.Add(10 * time.Minute), false, CodeUnavailable},
		{"409 in flight", Outcome{Decision: Retry, Code: CodeInFlight, RetryAfter: time.Second}, 0, now, zeroRnd, now.Add(time.Second), false, CodeInFlight},
		{"expired", Outcome{Decision: Retry, Code: CodeNetwork}, 50, clock.Add(2*time.Hour - 30*time.Second), maxRnd, time.Time{}, true, CodeRetryExpired},
		{"just in time", Outcome{Decision: Retry, Code: CodeNetwork}, 50, clock.Add(2*time.Hour - time.Minute), maxRnd, clock.Add(2 * time.Hour), false, CodeNetwork},
		{"Retry-After past the deadline", Outcome{Decision: Retry, Code: CodeRateLimited, RetryAfter: 5 * time.Minute}, 0, clock.Add(2*time.Hour - time.Minute), zeroRnd, time.Time{}, true, CodeRetryExpired},
		{"many attempts, not expired", Outcome{Decision: Retry, Code: CodeServerError}, 100000, now, maxRnd, now.Add(time.Minute), false, CodeServerError},
		{"permanent", Outcome{Decision: Permanent, Code: CodeForbidden}, 0, now, zeroRnd, time.Time{}, true, CodeForbidden},
		{"needs user action", Outcome{Decision: NeedsUserAction, Code: CodeValidation}, 0, now, zeroRnd, time.Time{}, true, CodeValidation},
	}
	for _, tt := range tests {
		at, giveUp, code := p.Next(tt.o, tt.attempt, created, tt.now, tt.rnd)
		if !at.Equal(tt.wantAt) || giveUp != tt.giveUp || code != tt.code {
			t.Errorf("%s: got (%v, %v, %q), want (%v, %v, %q)", tt.name, at, giveUp, code, tt.wantAt, tt.giveUp, tt.code)
		}
	}
}

// TestPolicyRetryAfterFloorProperty: a Retry outcome is never scheduled
// sooner than its Retry-After (up to MaxRetryAfter), nor later than
// now + max(Retry-After, backoff cap).
func TestPolicyRetryAfterFloorProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var p Policy // defaults
		ra := time.Duration(rapid.Int64Range(0, int64(48*time.Hour)).Draw(t, "retryAfter"))
		attempt := rapid.IntRange(0, 100).Draw(t, "attempt")
		age := time.Duration(rapid.Int64Range(0, int64(DefaultMaxElapsed)).Draw(t, "age"))
		seed := rapid.Uint64().Draw(t, "seed")
		now := clock.Add(age)
		o := Outcome{Decision: Retry, Code: CodeRateLimited, RetryAfter: ra}
		at, giveUp, code := p.Next(o, attempt, clock, now, rand.New(rand.NewPCG(seed, 3)).Int64N)
		floor := min(ra, DefaultMaxRetryAfter)
		ceil := max(floor, p.Backoff.Cap(attempt))
		deadline := clock.Add(DefaultMaxElapsed)
		if now.Add(floor).After(deadline) && !giveUp {
			t.Fatalf("scheduled at %v although the floor %v passes the deadline", at, floor)
		}
		if giveUp {
			if code != CodeRetryExpired || !now.Add(ceil).After(deadline) {
				t.Fatalf("gave up (%q) at age %v though now+%v is before the deadline", code, age, ceil)
			}
			return
		}
		if d := at.Sub(now); d < floor || d > ceil {
			t.Fatalf("delay %v, want in [%v, %v]", d, floor, ceil)
		}
		if at.After(deadline) {
			t.Fatalf("scheduled at %v, past the deadline", at)
		}
	})
}
