package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/syncd/syncd/queue"
	"pgregory.net/rapid"
)

// busStore opens a real store whose commits feed a bus.
func busStore(t *testing.T, bcfg BusConfig, qcfg queue.Config) (*queue.Store, *Bus) {
	t.Helper()
	bus := NewBus(bcfg)
	qcfg.OnCommit = bus.Publish
	qcfg.NoSync = true
	s, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), qcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.SetSource(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bus.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, bus
}

func writeNotes(t *testing.T, s *queue.Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		_, err := s.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "a", EntityType: "note", EntityID: fmt.Sprintf("n%d", i), Data: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// drain reads exactly n events from a subscription. It only reports
// with t.Errorf, so it may run on any goroutine.
func drain(t *testing.T, sub *Subscription, n int) []queue.Event {
	t.Helper()
	out := make([]queue.Event, 0, n)
	for len(out) < n {
		e, ok := sub.Next()
		if !ok {
			t.Errorf("subscription ended after %d of %d events: %v", len(out), n, sub.Err())
			return out
		}
		out = append(out, e)
	}
	return out
}

func checkContiguous(t *testing.T, events []queue.Event, from uint64) {
	t.Helper()
	for i, e := range events {
		if e.Seq != from+uint64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, from+uint64(i))
		}
	}
}

// A subscriber that goes away while state changes and comes back with
// since gets every missed event once, in order — from memory when the
// ring still holds them, from the durable log when it does not.
func TestBusResume(t *testing.T) {
	t.Parallel()
	for _, history := range []int{1000, 4} {
		t.Run(fmt.Sprintf("ring=%d", history), func(t *testing.T) {
			t.Parallel()
			s, bus := busStore(t, BusConfig{History: history}, queue.Config{})
			sub, err := bus.Subscribe(0, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			writeNotes(t, s, 0, 3) // 2 events each
			seen := drain(t, sub, 6)
			checkContiguous(t, seen, 1)
			sub.Close()

			writeNotes(t, s, 3, 5) // missed while away: seqs 7..16
			sub, err = bus.Subscribe(seen[len(seen)-1].Seq, Filter{})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			writeNotes(t, s, 8, 1) // live: 17, 18
			got := drain(t, sub, 12)
			checkContiguous(t, got, 7)
			select {
			case e := <-sub.C():
				if sub.Accept(e) {
					t.Fatalf("extra event %+v", e)
				}
			default:
			}
		})
	}
}

func TestBusResyncWhenHistoryIsGone(t *testing.T) {
	t.Parallel()
	s, bus := busStore(t, BusConfig{History: 2}, queue.Config{EventHistory: 4})
	writeNotes(t, s, 0, 5) // seqs 1..10
	if _, _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, since := range []uint64{1, 5, 99} {
		sub, err := bus.Subscribe(since, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		e, ok := sub.Next()
		if !ok || e.Type != EventResync || e.Seq != 10 {
			t.Fatalf("since %d: first event %+v, want resync at 10", since, e)
		}
		sub.Close()
	}
	// Still within the retained log: no resync.
	sub, _ := bus.Subscribe(6, Filter{})
	defer sub.Close()
	checkContiguous(t, drain(t, sub, 4), 7)
}

func TestBusManySubscribersSeeOneSequence(t *testing.T) {
	t.Parallel()
	s, bus := busStore(t, BusConfig{}, queue.Config{})
	const subs, writes = 200, 50
	var wg sync.WaitGroup
	results := make([][]queue.Event, subs)
	for i := range subs {
		sub, err := bus.Subscribe(0, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer sub.Close()
			results[i] = drain(t, sub, 2*writes)
		})
	}
	writeNotes(t, s, 0, writes)
	wg.Wait()
	for i, r := range results {
		checkContiguous(t, r, 1)
		for j := range r {
			if r[j].Seq != results[0][j].Seq || r[j].Type != results[0][j].Type || r[j].EntityID != results[0][j].EntityID {
				t.Fatalf("subscriber %d event %d differs", i, j)
			}
		}
	}
}

// A subscriber that never reads is cut off; the writer never waits.
func TestBusSlowSubscriberIsCutOff(t *testing.T) {
	t.Parallel()
	s, bus := busStore(t, BusConfig{SubscriberBuffer: 8}, queue.Config{})
	stuck, _ := bus.Subscribe(0, Filter{})
	live, _ := bus.Subscribe(0, Filter{})
	// 100 events, in lockstep with the live reader so only the stuck one
	// can fall behind; Publish would block forever if it waited for it.
	var got []queue.Event
	for i := range 50 {
		writeNotes(t, s, i, 1)
		got = append(got, drain(t, live, 2)...)
	}
	checkContiguous(t, got, 1)
	for range stuck.C() {
	}
	if !errors.Is(stuck.Err(), ErrSlowSubscriber) {
		t.Fatalf("stuck subscriber ended with %v", stuck.Err())
	}
	live.Close()
	if bus.Subscribers() != 0 {
		t.Fatalf("%d subscribers left", bus.Subscribers())
	}
}

func TestBusLimitsAndFilters(t *testing.T) {
	t.Parallel()
	s, bus := busStore(t, BusConfig{MaxSubscribers: 2}, queue.Config{})
	a, _ := bus.Subscribe(0, Filter{Types: []string{"operation."}})
	b, _ := bus.Subscribe(0, Filter{EntityType: "other"})
	if _, err := bus.Subscribe(0, Filter{}); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("third subscriber: %v", err)
	}
	writeNotes(t, s, 0, 2)
	for _, e := range drain(t, a, 2) {
		if e.Type != queue.EventOperationState {
			t.Fatalf("filtered subscriber got %+v", e)
		}
	}
	select {
	case e := <-b.C():
		t.Fatalf("entity-type filter let through %+v", e)
	default:
	}
	bus.Close()
	if _, ok := a.Next(); ok {
		// drain what was buffered
		for range a.C() {
		}
	}
	if !errors.Is(a.Err(), ErrBusClosed) || !errors.Is(b.Err(), ErrBusClosed) {
		t.Fatalf("after close: %v, %v", a.Err(), b.Err())
	}
}

// A since past every seq ever published (2^64-1 included: a client bug,
// or a data directory replaced under a client) is a resync, never an
// overflow. The bus keeps working after it: writes publish, other
// subscribers read, Close ends them.
func TestBusAbsurdSince(t *testing.T) {
	t.Parallel()
	for _, history := range []int{1, 4, 1000} {
		t.Run(fmt.Sprintf("ring=%d", history), func(t *testing.T) {
			t.Parallel()
			s, bus := busStore(t, BusConfig{History: history}, queue.Config{})
			writeNotes(t, s, 0, 3) // seqs 1..6
			last := bus.LastSeq()
			for _, since := range []uint64{math.MaxUint64, math.MaxUint64 - 1, 1 << 63, last + 1, last + 2} {
				sub, err := bus.Subscribe(since, Filter{})
				if err != nil {
					t.Fatalf("since %d: %v", since, err)
				}
				if e, ok := sub.Next(); !ok || e.Type != EventResync || e.Seq != last {
					t.Fatalf("since %d: first event %+v (%v), want resync at %d", since, e, ok, last)
				}
				sub.Close()
			}
			// Every since from 0 to last replays exactly what follows it.
			for since := range uint64(7) {
				sub, err := bus.Subscribe(since, Filter{})
				if err != nil {
					t.Fatal(err)
				}
				writeNotes(t, s, int(100+since), 1) // two live events
				got := drain(t, sub, int(last-since)+2)
				checkContiguous(t, got, since+1)
				sub.Close()
				last = bus.LastSeq()
			}
			live, err := bus.Subscribe(bus.LastSeq(), Filter{})
			if err != nil {
				t.Fatal(err)
			}
			writeNotes(t, s, 1000, 1)
			checkContiguous(t, drain(t, live, 2), last+1)
			bus.Close()
			if _, ok := live.Next(); ok || !errors.Is(live.Err(), ErrBusClosed) {
				t.Fatalf("after Close: %v", live.Err())
			}
		})
	}
}

// countingSource is the durable log behind a bus, counting what each
// read decodes.
type countingSource struct {
	EventSource
	mu      sync.Mutex
	reads   int
	decoded int
	maxRead int
}

func (c *countingSource) Events(since uint64, limit int) ([]queue.Event, uint64, error) {
	events, oldest, err := c.EventSource.Events(since, limit)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	c.decoded += len(events)
	c.maxRead = max(c.maxRead, len(events))
	return events, oldest, err
}

func (c *countingSource) counts() (reads, decoded, maxRead int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads, c.decoded, c.maxRead
}

// A resume from before the in-memory history reads the durable log in
// chunks as the subscriber takes them, each read its own short
// transaction; a since the log no longer holds is a resync decided
// before anything of the backlog is decoded.
func TestBusReplayIsChunked(t *testing.T) {
	t.Parallel()
	const chunk = 50
	s, bus := busStore(t, BusConfig{History: 4, ReplayChunk: chunk}, queue.Config{EventHistory: 1000})
	src := &countingSource{EventSource: s}
	if err := bus.SetSource(src); err != nil {
		t.Fatal(err)
	}
	writeNotes(t, s, 0, 1000) // seqs 1..2000
	if _, _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	oldest := bus.LastSeq() - 999 // the log keeps 1000 events

	// Swept: resync, at most one event decoded to find out.
	sub, err := bus.Subscribe(1, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if _, decoded, _ := src.counts(); decoded > 1 {
		t.Fatalf("the resync decision decoded %d events", decoded)
	}
	if e, ok := sub.Next(); !ok || e.Type != EventResync {
		t.Fatalf("first event %+v, want resync", e)
	}
	sub.Close()

	// In range: nothing read beyond the first event until the
	// subscriber reads, then chunks of at most 50.
	r0, d0, _ := src.counts()
	sub, err = bus.Subscribe(oldest-1, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, decoded, _ := src.counts(); decoded-d0 > 1 {
		t.Fatalf("Subscribe decoded %d events before the subscriber read any", decoded-d0)
	}
	got := drain(t, sub, 1000)
	checkContiguous(t, got, oldest)
	reads, decoded, maxRead := src.counts()
	if maxRead > chunk {
		t.Errorf("one read decoded %d events, want at most %d", maxRead, chunk)
	}
	if decoded-d0 != 1000 || reads-r0 < 1000/chunk {
		t.Errorf("replay of 1000 events: %d reads decoding %d", reads-r0, decoded-d0)
	}
}

// Events swept while a subscriber is part way through its replay: it
// gets a resync where the gap is, never a silent gap.
func TestBusReplaySweptMidway(t *testing.T) {
	t.Parallel()
	s, bus := busStore(t, BusConfig{History: 4, ReplayChunk: 10}, queue.Config{EventHistory: 100})
	writeNotes(t, s, 0, 50) // seqs 1..100
	sub, err := bus.Subscribe(0, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	checkContiguous(t, drain(t, sub, 10), 1)
	writeNotes(t, s, 50, 50) // seqs 101..200; sweep keeps 101..200
	if _, _, err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	var e queue.Event
	for {
		var ok bool
		if e, ok = sub.Next(); !ok {
			t.Fatalf("ended: %v", sub.Err())
		}
		if e.Type == EventResync {
			break
		}
		if e.Seq > 100 {
			t.Fatalf("event %d after a gap without a resync", e.Seq)
		}
	}
	// Live events follow the resync without a repeat.
	writeNotes(t, s, 100, 1)
	got := drain(t, sub, 2)
	if got[0].Seq <= e.Seq {
		t.Fatalf("after resync at %d: %+v", e.Seq, got)
	}
}

// TestBusRingMatchesModel: the circular history holds what a slice of
// the newest events would, whatever the sizes and the number published.
func TestBusRingMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.IntRange(1, 9).Draw(t, "size")
		var r ring
		var model []queue.Event
		for i := range rapid.IntRange(0, 40).Draw(t, "events") {
			e := queue.Event{Seq: uint64(i + 1)}
			r.push(e, size)
			model = append(model, e)
			if len(model) > size {
				model = model[1:]
			}
			if r.n != len(model) {
				t.Fatalf("after %d: %d held, want %d", i+1, r.n, len(model))
			}
			from := rapid.IntRange(0, r.n).Draw(t, "from")
			if got := r.from(from); !slices.EqualFunc(got, model[from:], func(a, b queue.Event) bool { return a.Seq == b.Seq }) {
				t.Fatalf("after %d, from %d: %v, want %v", i+1, from, got, model[from:])
			}
		}
		if len(r.buf) > size {
			t.Fatalf("buffer of %d for a history of %d", len(r.buf), size)
		}
	})
}

// BenchmarkBusPublish: one event published into a full history
// (DefaultBusHistory). The slice shifted at every publish took 12,146
// ns an event on the 2-core CI machine; the ring, 36 ns.
func BenchmarkBusPublish(b *testing.B) {
	bus := NewBus(BusConfig{})
	batch := make([]queue.Event, 1)
	seq := uint64(0)
	for range DefaultBusHistory {
		seq++
		batch[0] = queue.Event{Seq: seq, Type: queue.EventEntityChanged}
		bus.Publish(batch)
	}
	b.ResetTimer()
	for b.Loop() {
		seq++
		batch[0] = queue.Event{Seq: seq, Type: queue.EventEntityChanged}
		bus.Publish(batch)
	}
	b.StopTimer()
	bus.Close()
}
