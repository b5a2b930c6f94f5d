package daemon

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/syncd/syncd/queue"
)

// Defaults of the event bus.
const (
	// DefaultBusHistory is how many recent events the bus keeps in memory
	// for subscribers that resume; older ones are read from the store's
	// change log (queue.Config.EventHistory).
	DefaultBusHistory = 4096
	// DefaultSubscriberBuffer is how many events a subscriber may fall
	// behind before it is cut off.
	DefaultSubscriberBuffer = 1024
	// DefaultMaxSubscribers caps concurrent subscribers.
	DefaultMaxSubscribers = 256
)

// EventResync is sent instead of a replay when a subscriber asks to
// resume after a seq the history no longer holds: it must re-read state.
// Its Seq is the newest seq at the time; resume after it.
const EventResync = "resync"

// Errors of the event bus.
var (
	// ErrSlowSubscriber closes a subscription whose reader fell more than
	// its buffer behind. Writes and the drain never wait for a reader.
	ErrSlowSubscriber = errors.New("daemon: subscriber too slow, events dropped")
	// ErrTooManySubscribers is returned by Subscribe at the limit.
	ErrTooManySubscribers = errors.New("daemon: too many event subscribers")
	// ErrBusClosed ends every subscription when the bus closes.
	ErrBusClosed = errors.New("daemon: event bus closed")
)

// BusConfig configures a Bus; the zero value means defaults.
type BusConfig struct {
	History          int
	SubscriberBuffer int
	MaxSubscribers   int
}

// Bus fans the queue's committed change-log events out to subscribers.
// Publish is the queue's OnCommit hook: it never blocks. Each subscriber
// has a bounded buffer and is cut off (ErrSlowSubscriber) rather than
// slowing the writer.
type Bus struct {
	cfg BusConfig

	mu      sync.Mutex
	ring    []queue.Event // the newest events, oldest first, contiguous seqs
	subs    map[*Subscription]struct{}
	last    uint64 // newest seq published
	closed  bool
	backlog EventSource
}

// EventSource is the durable history behind the bus: the store.
type EventSource interface {
	Events(since uint64, limit int) ([]queue.Event, uint64, error)
	LastEventSeq() (uint64, error)
}

// NewBus returns a bus. Attach the store with SetSource before the first
// Subscribe so resumes can reach past the in-memory history.
func NewBus(cfg BusConfig) *Bus {
	if cfg.History <= 0 {
		cfg.History = DefaultBusHistory
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if cfg.MaxSubscribers <= 0 {
		cfg.MaxSubscribers = DefaultMaxSubscribers
	}
	return &Bus{cfg: cfg, subs: map[*Subscription]struct{}{}}
}

// SetSource attaches the durable history and takes its newest seq.
func (b *Bus) SetSource(src EventSource) error {
	last, err := src.LastEventSeq()
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backlog = src
	b.last = max(b.last, last)
	return nil
}

// Publish delivers committed events (in seq order) to every subscriber.
// It is the queue's Config.OnCommit.
func (b *Bus) Publish(events []queue.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, e := range events {
		if e.Seq <= b.last {
			continue // already published
		}
		b.last = e.Seq
		if len(b.ring) == b.cfg.History {
			copy(b.ring, b.ring[1:])
			b.ring = b.ring[:len(b.ring)-1]
		}
		b.ring = append(b.ring, e)
		for s := range b.subs {
			if !s.filter.Match(e) {
				continue
			}
			select {
			case s.ch <- e:
			default:
				b.dropLocked(s, ErrSlowSubscriber)
			}
		}
	}
}

// Filter selects events. Empty fields match everything.
type Filter struct {
	// Types are event types or prefixes ending in "." ("entity.").
	Types      []string
	EntityType string
	AccountID  string
}

// Match reports whether e passes the filter. Resync events always pass.
func (f Filter) Match(e queue.Event) bool {
	if e.Type == EventResync {
		return true
	}
	if f.EntityType != "" && e.EntityType != f.EntityType {
		return false
	}
	if f.AccountID != "" && e.AccountID != f.AccountID {
		return false
	}
	if len(f.Types) == 0 {
		return true
	}
	for _, t := range f.Types {
		if t == e.Type || strings.HasSuffix(t, ".") && strings.HasPrefix(e.Type, t) {
			return true
		}
	}
	return false
}

// Subscription is one subscriber's stream: first the missed events
// (Replay), then live ones on C. C closes when the subscription ends;
// Err says why.
type Subscription struct {
	bus    *Bus
	filter Filter
	ch     chan queue.Event
	// Replay holds the events after `since` that were committed before
	// the subscription started, oldest first; or one resync event.
	Replay []queue.Event

	mu   sync.Mutex
	err  error
	last uint64 // newest seq handed out via Next
}

// C returns the live channel. Prefer Next, which also drains Replay and
// skips duplicates.
func (s *Subscription) C() <-chan queue.Event { return s.ch }

// Err returns why the subscription ended, or nil while it is open.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	s.bus.dropLocked(s, nil)
}

func (b *Bus) dropLocked(s *Subscription, err error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.ch)
}

// Subscribe starts a subscription that resumes after seq since (0: from
// the start of the retained history; use LastSeq to start from now).
// When since is older than the retained history, or newer than anything
// ever published (a data directory that was reset), Replay is a single
// resync event.
func (b *Bus) Subscribe(since uint64, f Filter) (*Subscription, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrBusClosed
	}
	if len(b.subs) >= b.cfg.MaxSubscribers {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w (limit %d)", ErrTooManySubscribers, b.cfg.MaxSubscribers)
	}
	s := &Subscription{bus: b, filter: f, ch: make(chan queue.Event, b.cfg.SubscriberBuffer)}
	b.subs[s] = struct{}{}
	// Copy only the part of the ring after since (seqs in the ring are
	// contiguous): Publish, and so every commit, waits while this holds
	// the lock. ringStart is the first seq the ring held.
	var ring []queue.Event
	var ringStart uint64
	if len(b.ring) > 0 {
		ringStart = b.ring[0].Seq
		from := 0
		if since >= ringStart {
			from = min(int(since-ringStart+1), len(b.ring))
		}
		ring = append([]queue.Event(nil), b.ring[from:]...)
	}
	last, src := b.last, b.backlog
	b.mu.Unlock()

	resync := []queue.Event{{Seq: last, Type: EventResync}}
	switch {
	case since > last:
		s.Replay = resync
	case since == last:
	case ringStart > 0 && since+1 >= ringStart:
		s.Replay = after(ring, since, f)
	case src == nil:
		s.Replay = resync
	default:
		// Older than the in-memory history: read the durable log up to
		// where the ring starts (or to the end when the ring is empty).
		upto := last
		if ringStart > 0 {
			upto = ringStart - 1
		}
		events, oldest, err := src.Events(since, int(upto-since))
		if err != nil {
			s.Close()
			return nil, err
		}
		if oldest == 0 || since+1 < oldest {
			s.Replay = resync
			break
		}
		s.Replay = append(after(events, since, f), after(ring, since, f)...)
	}
	return s, nil
}

func after(events []queue.Event, since uint64, f Filter) []queue.Event {
	var out []queue.Event
	for _, e := range events {
		if e.Seq > since && f.Match(e) {
			out = append(out, e)
		}
	}
	return out
}

// Next returns the next event: Replay first, then live events, skipping
// any seq already returned. ok is false when the subscription has ended
// (see Err). It blocks until an event arrives; select on C to also wait
// for something else.
func (s *Subscription) Next() (e queue.Event, ok bool) {
	for {
		if len(s.Replay) > 0 {
			e, s.Replay = s.Replay[0], s.Replay[1:]
		} else if e, ok = <-s.ch; !ok {
			return e, false
		}
		if s.Accept(e) {
			return e, true
		}
	}
}

// Accept records e as delivered and reports whether it is new (its seq
// is above every seq delivered before). Readers that select on C use it
// to drop the overlap between Replay and live events.
func (s *Subscription) Accept(e queue.Event) bool {
	if e.Type == EventResync {
		s.last = max(s.last, e.Seq)
		return true
	}
	if e.Seq <= s.last {
		return false
	}
	s.last = e.Seq
	return true
}

// LastSeq returns the newest seq published.
func (b *Bus) LastSeq() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Subscribers returns the number of open subscriptions.
func (b *Bus) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Close ends every subscription with ErrBusClosed and refuses new ones.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		b.dropLocked(s, ErrBusClosed)
	}
}
