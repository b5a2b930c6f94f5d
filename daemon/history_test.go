package daemon

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// countsStore is a HistoryStore whose counts the test sets.
type countsStore struct {
	mu     sync.Mutex
	counts map[queue.State]int
	err    error
	calls  int
	failAt int // the call (1, 2, ...) that fails, if not 0
}

func (s *countsStore) set(c map[queue.State]int) {
	s.mu.Lock()
	s.counts = c
	s.mu.Unlock()
}

func (s *countsStore) Stats() (queue.Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls == s.failAt {
		return queue.Stats{}, errors.New("read failed")
	}
	return queue.Stats{Counts: s.counts}, s.err
}

func doneEvent(id, mergedInto string) queue.Event {
	return queue.Event{Type: queue.EventOperationState, OperationID: id, State: queue.StateDone, MergedInto: mergedInto}
}

// A sample counts the operations not done, pending and failed, and the
// operations sent since the sample before; an update merged unsent,
// another state or another event is not a send.
func TestHistorySample(t *testing.T) {
	t.Parallel()
	clock := newClock()
	st := &countsStore{}
	h, err := NewHistory(HistoryConfig{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Sample(); err == nil {
		t.Fatal("a sample without a store")
	}
	h.SetStore(st)
	st.set(map[queue.State]int{queue.StatePending: 3, queue.StateSending: 2, queue.StateRetryWaiting: 1, queue.StatePermanentFailed: 4, queue.StateDone: 50})
	h.Observe([]queue.Event{doneEvent("a", ""), doneEvent("b", ""), doneEvent("m", "c"),
		{Type: queue.EventOperationState, OperationID: "p", State: queue.StatePending},
		{Type: queue.EventEntityChanged, EntityID: "e"}})
	h.Observe([]queue.Event{doneEvent("c", "")})
	got, err := h.Sample()
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{At: clock.Now().UTC().Truncate(time.Second), Queued: 10, Pending: 3, Failed: 4, Sent: 3}
	if got != want {
		t.Errorf("sample %+v, want %+v", got, want)
	}
	clock.Advance(10 * time.Second)
	got, _ = h.Sample()
	if got.Sent != 0 || got.Queued != 10 || !got.At.Equal(want.At.Add(10*time.Second)) {
		t.Errorf("second sample %+v: the sends are counted once", got)
	}
	if s := h.Samples(); len(s) != 2 || s[0] != want {
		t.Errorf("samples %+v", s)
	}
	st.err = errors.New("disk gone")
	if _, err := h.Sample(); err == nil {
		t.Error("a store error is not returned")
	}
	if len(h.Samples()) != 2 {
		t.Error("a failed sample was kept")
	}
}

// History keeps the last Samples samples, oldest first (an hour at the
// defaults).
func TestHistoryKeepsTheLastHour(t *testing.T) {
	t.Parallel()
	clock := newClock()
	h, err := NewHistory(HistoryConfig{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if h.Interval() != 10*time.Second || DefaultHistorySamples != 360 {
		t.Fatalf("interval %v, samples %d: want 10s and 360 (an hour)", h.Interval(), DefaultHistorySamples)
	}
	h.SetStore(&countsStore{})
	start := clock.Now().UTC()
	for i := range DefaultHistorySamples + 5 {
		h.Observe([]queue.Event{doneEvent("x", "")})
		if _, err := h.Sample(); err != nil {
			t.Fatal(err)
		}
		if i < DefaultHistorySamples+4 {
			clock.Advance(h.Interval())
		}
	}
	s := h.Samples()
	if len(s) != DefaultHistorySamples {
		t.Fatalf("%d samples kept, want %d", len(s), DefaultHistorySamples)
	}
	if !s[0].At.Equal(start.Add(5*h.Interval())) || !s[len(s)-1].At.Equal(clock.Now().UTC()) {
		t.Errorf("kept %v to %v, want the last hour up to %v", s[0].At, s[len(s)-1].At, clock.Now())
	}
	for i := 1; i < len(s); i++ {
		if !s[i].At.After(s[i-1].At) || s[i].Sent != 1 {
			t.Fatalf("sample %d: %+v after %+v", i, s[i], s[i-1])
		}
	}
	// Samples returns a copy.
	s[0].Queued = 99
	if h.Samples()[0].Queued == 99 {
		t.Error("Samples shares its slice")
	}
}

// The loop takes a sample per tick; Stop ends it and waits (goleak
// checks in TestMain), is safe twice and before Start; Start after
// Stop does nothing.
func TestHistoryLoop(t *testing.T) {
	t.Parallel()
	ticks := make(chan time.Time) // unbuffered: a send returns once the loop took it
	clock := newClock()
	h, err := NewHistory(HistoryConfig{Now: clock.Now, Ticks: ticks, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The second read fails: logged, and the loop goes on.
	st := &countsStore{counts: map[queue.State]int{queue.StatePending: 1}, failAt: 2}
	h.SetStore(st)
	h.Start(context.Background())
	h.Start(context.Background()) // no-op
	for range 4 {
		ticks <- time.Time{}
	}
	h.Stop() // the fourth tick's sample is taken before the loop ends
	h.Stop()
	if n := len(h.Samples()); n != 3 {
		t.Errorf("%d samples after 4 ticks, one read failing; want 3", n)
	}
	h.Start(context.Background()) // after Stop: nothing runs
	h.life.mu.Lock()
	state := h.life.state
	h.life.mu.Unlock()
	if state != lifeStopped {
		t.Error("Start after Stop started the loop")
	}

	idle, _ := NewHistory(HistoryConfig{})
	idle.Stop() // before Start
	idle.Stop()

	// The loop ends with its context too.
	ctx, cancel := context.WithCancel(context.Background())
	byCtx, _ := NewHistory(HistoryConfig{Ticks: make(chan time.Time)})
	byCtx.Start(ctx)
	cancel()
	byCtx.Stop()

	if _, err := NewHistory(HistoryConfig{Interval: -time.Second}); err == nil {
		t.Error("a negative interval was accepted")
	}
	if _, err := NewHistory(HistoryConfig{Samples: -1}); err == nil {
		t.Error("a negative sample count was accepted")
	}
}
