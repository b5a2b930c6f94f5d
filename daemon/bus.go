package daemon

import (
	"errors"
	"fmt"
	"slices"
	"sort"
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
	// DefaultReplayChunk is how many events one read of the durable
	// change log decodes when a subscriber resumes from before the
	// in-memory history. Each read is its own short read transaction (a
	// long one would hold up the remap a growing write needs), and a
	// replay holds at most one chunk in memory.
	DefaultReplayChunk = 256
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
	// ReplayChunk bounds the events one read of the durable log decodes
	// during a replay (default DefaultReplayChunk).
	ReplayChunk int
}

// Bus fans the queue's committed change-log events out to subscribers.
// Publish is the queue's OnCommit hook: it never blocks. Each subscriber
// has a bounded buffer and is cut off (ErrSlowSubscriber) rather than
// slowing the writer.
//
// Every method releases the bus's lock with defer, so a panic anywhere
// under it cannot leave Publish, and so every commit, waiting forever.
type Bus struct {
	cfg BusConfig

	mu      sync.Mutex
	ring    ring // the newest events, seqs ascending
	subs    map[*Subscription]struct{}
	last    uint64 // newest seq published
	closed  bool
	backlog EventSource
}

// EventSource is the durable history behind the bus: the store.
type EventSource interface {
	// Events returns up to limit events with seq > since, oldest first,
	// and the seq of the oldest event kept (0: none).
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
	if cfg.ReplayChunk <= 0 {
		cfg.ReplayChunk = DefaultReplayChunk
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
		b.ring.push(e, b.cfg.History)
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
	// Granted, if not nil, is a scope (an app token's): only events of
	// these entity types pass, and those of no entity type (session,
	// connectivity) but the ones in Withheld.
	Granted map[string]bool
	// Withheld lists event types that never pass.
	Withheld []string
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
	if f.Granted != nil && e.EntityType != "" && !f.Granted[e.EntityType] || slices.Contains(f.Withheld, e.Type) {
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

// Subscription is one subscriber's stream: first the missed events (the
// replay: ReplayChunk, or Next), then live ones on C. C closes when the
// subscription ends; Err says why.
//
// The replay is read from the durable log as the subscriber takes it, a
// chunk (BusConfig.ReplayChunk events) at a time, so resuming from far
// back holds neither a long read transaction nor the whole backlog in
// memory. Only one goroutine may read the replay.
type Subscription struct {
	bus    *Bus
	filter Filter
	ch     chan queue.Event

	// The replay. pending is handed out first; then, while src is set,
	// the log is read after readFrom up to readUpto.
	pending  []queue.Event
	src      EventSource
	readFrom uint64
	readUpto uint64

	mu   sync.Mutex
	err  error
	last uint64 // newest seq handed out via Next
}

// C returns the live channel. Prefer Next, which also drains the replay
// and skips duplicates.
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

// end ends the subscription with err.
func (s *Subscription) end(err error) {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	s.bus.dropLocked(s, err)
}

func (b *Bus) dropLocked(s *Subscription, err error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	s.setErr(err)
	close(s.ch)
}

func (s *Subscription) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// ReplayChunk returns the next part of the replay, oldest first: the
// events after since that were committed before the subscription
// started, or a single resync event. It returns no events once the
// replay is over; live events follow on C. An error reading the
// durable log ends the replay (the caller should end the
// subscription).
func (s *Subscription) ReplayChunk() ([]queue.Event, error) {
	for len(s.pending) == 0 && s.src != nil {
		if err := s.read(); err != nil {
			return nil, err
		}
	}
	out := s.pending
	s.pending = nil
	return out, nil
}

// read reads the next chunk of the durable log into pending.
func (s *Subscription) read() error {
	if s.readFrom >= s.readUpto {
		s.src = nil
		return nil
	}
	n := int(min(s.readUpto-s.readFrom, uint64(s.bus.cfg.ReplayChunk)))
	events, oldest, err := s.src.Events(s.readFrom, n)
	if err != nil {
		s.src = nil
		return fmt.Errorf("daemon: replaying events after %d: %w", s.readFrom, err)
	}
	if oldest == 0 || s.readFrom+1 < oldest || len(events) == 0 {
		// Swept since the subscription started: the subscriber missed
		// events and must re-read state.
		s.src = nil
		s.pending = []queue.Event{{Seq: s.readUpto, Type: EventResync}}
		return nil
	}
	from := s.readFrom
	s.readFrom = events[len(events)-1].Seq
	s.pending = after(events, from, s.readUpto, s.filter)
	return nil
}

// Subscribe starts a subscription that resumes after seq since (0: from
// the start of the retained history; use LastSeq to start from now).
// When since is older than the retained history, or newer than anything
// ever published (a data directory that was reset, or a since no
// publisher made, up to 2^64-1), the replay is a single resync event.
// Whether the log still holds what follows since is decided before any
// of the backlog is read; the backlog itself is read in chunks as the
// subscriber takes it (ReplayChunk).
func (b *Bus) Subscribe(since uint64, f Filter) (*Subscription, error) {
	s, ring, last, src, err := b.register(since, f)
	if err != nil {
		return nil, err
	}
	resync := []queue.Event{{Seq: last, Type: EventResync}}
	switch {
	case since > last:
		s.pending = resync
	case since == last:
	case ring != nil:
		s.pending = after(ring, since, last, f)
	case src == nil:
		s.pending = resync
	default:
		// Older than the in-memory history: is the event after since
		// still in the durable log? One event read tells, and it is the
		// replay's first.
		events, oldest, err := src.Events(since, 1)
		if err != nil {
			s.Close()
			return nil, err
		}
		if oldest == 0 || since+1 < oldest || len(events) == 0 {
			s.pending = resync
			break
		}
		s.pending = after(events, since, last, f)
		s.src, s.readFrom, s.readUpto = src, events[0].Seq, last
	}
	return s, nil
}

// register adds a subscription and, when the in-memory history holds
// every event after since up to the newest, copies that part of it
// (ring is nil otherwise). Publish, and so every commit, waits while the
// lock is held, so only the part after since is copied.
func (b *Bus) register(since uint64, f Filter) (s *Subscription, ring []queue.Event, last uint64, src EventSource, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil, 0, nil, ErrBusClosed
	}
	if len(b.subs) >= b.cfg.MaxSubscribers {
		return nil, nil, 0, nil, fmt.Errorf("%w (limit %d)", ErrTooManySubscribers, b.cfg.MaxSubscribers)
	}
	s = &Subscription{bus: b, filter: f, ch: make(chan queue.Event, b.cfg.SubscriberBuffer)}
	b.subs[s] = struct{}{}
	last, src = b.last, b.backlog
	if n := b.ring.n; since < last && n > 0 && b.ring.at(0).Seq <= since+1 && b.ring.at(n-1).Seq == last {
		from := sort.Search(n, func(i int) bool { return b.ring.at(i).Seq > since })
		ring = b.ring.from(from)
	}
	return s, ring, last, src, nil
}

// ring holds the newest events in a circular buffer: a publish writes
// one slot, instead of shifting the whole history once it is full (which
// took a quarter of the daemon's CPU during a bootstrap, under the bus
// lock and inside the commit path).
type ring struct {
	buf  []queue.Event
	head int // index of the oldest event
	n    int // events held
}

// push adds e, the newest, dropping the oldest once size are held.
func (r *ring) push(e queue.Event, size int) {
	if len(r.buf) < size && r.n == len(r.buf) {
		// Grow until the history's size: a daemon with few events
		// never holds the whole buffer.
		r.buf = append(r.buf, e)
		r.n++
		return
	}
	if r.n < len(r.buf) {
		r.buf[(r.head+r.n)%len(r.buf)] = e
		r.n++
		return
	}
	r.buf[r.head] = e
	r.head = (r.head + 1) % len(r.buf)
}

// at returns the i-th oldest event held.
func (r *ring) at(i int) queue.Event { return r.buf[(r.head+i)%len(r.buf)] }

// from copies the events from the i-th oldest on.
func (r *ring) from(i int) []queue.Event {
	out := make([]queue.Event, 0, r.n-i)
	for ; i < r.n; i++ {
		out = append(out, r.at(i))
	}
	return out
}

// after returns the events with since < seq <= upto that pass f.
func after(events []queue.Event, since, upto uint64, f Filter) []queue.Event {
	var out []queue.Event
	for _, e := range events {
		if e.Seq > since && e.Seq <= upto && f.Match(e) {
			out = append(out, e)
		}
	}
	return out
}

// Next returns the next event: the replay first, then live events,
// skipping any seq already returned. ok is false when the subscription
// has ended (see Err; an error reading the replay ends it too). It blocks until an event arrives; select on C to also wait
// for something else.
func (s *Subscription) Next() (e queue.Event, ok bool) {
	for {
		if len(s.pending) == 0 && s.src != nil {
			chunk, err := s.ReplayChunk()
			if err != nil {
				s.end(err)
				return e, false
			}
			s.pending = chunk
		}
		if len(s.pending) > 0 {
			e, s.pending = s.pending[0], s.pending[1:]
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
// to drop the overlap between the replay and live events.
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
