// Package clocktest is the injected clock of syncd's tests: time moves
// only when a test says so, so retry, lease and expiry logic is tested
// without waiting.
package clocktest

import (
	"sync"
	"time"
)

// Start is where every Clock starts.
var Start = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

// Clock is a manual clock, safe for concurrent use. Pass its Now where a
// Config takes a clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock at Start.
func New() *Clock { return At(Start) }

// At returns a Clock at t.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
