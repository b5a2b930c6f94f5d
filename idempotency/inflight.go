package idempotency

import (
	"context"
	"sync"
	"time"
)

// inflight serialises requests with the same (actor, key) inside one
// process. It is an optimisation and the source of 409 answers for stores
// that would otherwise just block (bbolt); correctness across processes
// rests on the store's reservation.
type inflight struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// acquire claims id, waiting up to wait (not at all when wait <= 0) for a
// holder to release it. It returns false when the wait ran out or ctx
// ended first.
func (f *inflight) acquire(ctx context.Context, id string, wait time.Duration) (release func(), ok bool) {
	var timeout <-chan time.Time
	for {
		f.mu.Lock()
		ch, held := f.m[id]
		if !held {
			ch = make(chan struct{})
			f.m[id] = ch
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.m, id)
				f.mu.Unlock()
				close(ch)
			}, true
		}
		f.mu.Unlock()
		if wait <= 0 {
			return nil, false
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}
