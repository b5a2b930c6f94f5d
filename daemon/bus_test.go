package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/syncd/syncd/queue"
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
