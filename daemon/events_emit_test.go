package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// Totals appends queue.totals only when the counts changed, with a seq
// from the change log, and the loop coalesces bursts of writes.
func TestTotals(t *testing.T) {
	t.Parallel()
	totals := NewTotals(TotalsConfig{Interval: time.Millisecond, Logger: testLogger(t)})
	bus := NewBus(BusConfig{})
	s, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{NoSync: true, OnCommit: func(es []queue.Event) {
		bus.Publish(es)
		totals.Observe(es)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		totals.Stop()
		bus.Close()
		s.Close()
	})
	if err := bus.SetSource(s); err != nil {
		t.Fatal(err)
	}
	if err := totals.SetStore(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ok, err := totals.RunOnce(ctx); ok || err != nil {
		t.Fatalf("RunOnce with nothing changed: %v, %v", ok, err)
	}
	writeNotes(t, s, 0, 3)
	if ok, err := totals.RunOnce(ctx); !ok || err != nil {
		t.Fatalf("RunOnce after writes: %v, %v", ok, err)
	}
	if ok, _ := totals.RunOnce(ctx); ok {
		t.Fatal("a second RunOnce without changes appended an event")
	}
	events, _, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	var d TotalsData
	if err := json.Unmarshal(last.Data, &d); err != nil || last.Type != EventQueueTotals || last.Seq != 7 || d.Counts[queue.StatePending] != 3 {
		t.Fatalf("last event %+v (%s): %v", last, last.Data, err)
	}

	// The loop: a write wakes it, one event follows.
	sub, err := bus.Subscribe(bus.LastSeq(), Filter{Types: []string{EventQueueTotals}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	totals.Start(ctx)
	defer totals.Stop()
	writeNotes(t, s, 3, 1)
	e, ok := sub.Next()
	if !ok || e.Type != EventQueueTotals {
		t.Fatalf("got %+v, %v", e, ok)
	}
	if err := json.Unmarshal(e.Data, &d); err != nil || d.Counts[queue.StatePending] != 4 {
		t.Fatalf("totals %s", e.Data)
	}
	totals.Stop()
	totals.Stop()
}
