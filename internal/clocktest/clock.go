// Package clocktest is the injected clock of syncd's tests: time moves
// only when a test says so, so retry, lease and expiry logic is tested
// without waiting.
//
// The clock is the idempotency library's idempotencytest.Clock (the
// library is its own module and cannot import this one); this package
// fixes where syncd's tests start it.
package clocktest

import (
	"time"

	"github.com/syncd/syncd/idempotency/idempotencytest"
)

// Start is where every Clock starts.
var Start = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

// Clock is a manual clock, safe for concurrent use. Pass its Now where a
// Config takes a clock.
type Clock = idempotencytest.Clock

// New returns a Clock at Start.
func New() *Clock { return At(Start) }

// At returns a Clock at t.
func At(t time.Time) *Clock { return idempotencytest.NewClock(t) }
