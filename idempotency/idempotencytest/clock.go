package idempotencytest

import (
	"sync"
	"time"
)

// Clock is a manual clock, safe for concurrent use: time moves only when
// a test says so, so expiry and lease logic is tested without waiting.
// Pass its Now as Config.Now. syncd's own tests use it too (through the
// daemon module's internal/clocktest), so it has one home.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

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
