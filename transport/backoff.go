package transport

import (
	"cmp"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of Backoff and Policy.
const (
	// DefaultBackoffBase is the cap of the first retry's delay.
	DefaultBackoffBase = time.Second

	// DefaultBackoffMax caps every delay of the backoff.
	DefaultBackoffMax = 5 * time.Minute

	// DefaultMaxElapsed is how long after an operation was created it is
	// still retried: a day short of the reference server's 7-day
	// idempotency retention. Past it, a resend might find the server has
	// forgotten the key and apply the operation a second time, so the
	// operation fails with CodeRetryExpired for the user to review. It is
	// days, not hours, because a local-first app must survive a weekend
	// offline without failing its writes.
	DefaultMaxElapsed = 6 * 24 * time.Hour

	// DefaultMaxRetryAfter caps a server's Retry-After. Larger values
	// come from broken servers or skewed clocks (HTTP-date form).
	DefaultMaxRetryAfter = 24 * time.Hour
)

// CodeRetryExpired is the code Policy.Next gives up with when the next
// attempt would come after the operation's MaxElapsed.
const CodeRetryExpired = "retry_expired"

// Backoff is capped exponential backoff with full jitter: the delay before
// retry n (0-based) is uniform in [0, min(Max, Base*2^n)]. Full jitter
// spreads the retries of many clients that failed together (after an
// outage) instead of sending them back in synchronized waves. The zero
// value uses DefaultBackoffBase and DefaultBackoffMax.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// Cap returns min(Max, Base*2^attempt), the upper bound of Next, without
// overflowing. A negative attempt counts as 0.
func (b Backoff) Cap(attempt int) time.Duration {
	base := cmp.Or(max(b.Base, 0), DefaultBackoffBase)
	ceil := cmp.Or(max(b.Max, 0), DefaultBackoffMax)
	attempt = max(attempt, 0)
	if base >= ceil || attempt >= 63 || base > ceil>>attempt {
		return ceil
	}
	return base << attempt
}

// Next returns the delay before retry attempt (0 for the first retry,
// after the first failed attempt): uniform in [0, Cap(attempt)]. rnd(n)
// returns a uniform value in [0, n), like (*rand.Rand).Int64N; nil means
// math/rand/v2's Int64N. Tests pass a seeded generator.
func (b Backoff) Next(attempt int, rnd func(n int64) int64) time.Duration {
	if rnd == nil {
		rnd = rand.Int64N
	}
	c := int64(b.Cap(attempt))
	if c == math.MaxInt64 {
		return time.Duration(rnd(c))
	}
	return time.Duration(rnd(c + 1))
}

// Policy decides when a Retry outcome is sent again, and when retrying
// stops. Retrying stops by error kind (only Retry outcomes are retried)
// and by elapsed time since the operation was created, not by a count of
// attempts: an app offline for a day makes many failed attempts that say
// nothing about whether the operation can succeed. The zero value uses
// the defaults.
type Policy struct {
	Backoff Backoff

	// MaxElapsed is how long after its creation an operation is still
	// retried (default DefaultMaxElapsed).
	MaxElapsed time.Duration

	// MaxRetryAfter caps a server's Retry-After (default
	// DefaultMaxRetryAfter).
	MaxRetryAfter time.Duration
}

// Next schedules the retry of an operation created at createdAt whose
// Send returned o at now. attempt is the 0-based index of the retry being
// scheduled: the operation's attempt count minus one.
//
// For a Retry outcome the delay is max(o.RetryAfter, backoff): the
// server's Retry-After (capped at MaxRetryAfter) is a floor, the jittered
// backoff keeps clients that got the same Retry-After from coming back
// together only when it is longer. If now+delay is past
// createdAt+MaxElapsed, Next gives up with CodeRetryExpired.
//
// Any other decision is not retried by time: Next gives up with o.Code.
// (The daemon handles Done and RefreshSession before asking.)
func (p Policy) Next(o Outcome, attempt int, createdAt, now time.Time, rnd func(n int64) int64) (retryAt time.Time, giveUp bool, code string) {
	if o.Decision != Retry {
		return time.Time{}, true, o.Code
	}
	deadline := createdAt.Add(cmp.Or(p.MaxElapsed, DefaultMaxElapsed))
	retryAt = now.Add(p.Delay(o, attempt, rnd))
	if retryAt.After(deadline) {
		return time.Time{}, true, CodeRetryExpired
	}
	return retryAt, false, o.Code
}

// Delay is the wait before retry attempt of a Retry outcome o, without
// a deadline: max(o.RetryAfter capped at MaxRetryAfter, the jittered
// backoff). Next adds the deadline; the daemon uses Delay alone for an
// operation no attempt of which may have been applied, which is never
// given up for its age.
func (p Policy) Delay(o Outcome, attempt int, rnd func(n int64) int64) time.Duration {
	delay := p.Backoff.Next(attempt, rnd)
	if ra := min(o.RetryAfter, cmp.Or(p.MaxRetryAfter, DefaultMaxRetryAfter)); ra > delay {
		delay = ra
	}
	return delay
}
