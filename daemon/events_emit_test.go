package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
)

// Totals appends queue.totals only when the counts changed, with a seq
// from the change log, and the loop coalesces bursts of writes.
func TestTotals(t *testing.T) {
	t.Parallel()
	totals, bus, s := startTotals(t)
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

// While an account is signed in, queue.totals carries its share beside
// the totals, and a change of account is reported even when no count
// changed.
func TestTotalsAccountShare(t *testing.T) {
	t.Parallel()
	totals := NewTotals(TotalsConfig{Interval: time.Millisecond, Logger: testLogger(t)})
	s, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := totals.SetStore(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	writeNotes(t, s, 0, 2) // account a's
	account := "a"
	totals.SetAccount(func() (string, bool) { return account, account != "" })
	last := func() TotalsData {
		t.Helper()
		events, _, err := s.Events(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		e := events[len(events)-1]
		var d TotalsData
		if err := json.Unmarshal(e.Data, &d); err != nil || e.Type != EventQueueTotals {
			t.Fatalf("last event %+v: %v", e, err)
		}
		return d
	}
	if ok, err := totals.RunOnce(ctx); !ok || err != nil {
		t.Fatalf("RunOnce: %v, %v", ok, err)
	}
	if d := last(); d.AccountID != "a" || d.AccountCounts[queue.StatePending] != 2 || d.Counts[queue.StatePending] != 2 {
		t.Fatalf("a's totals: %+v", d)
	}
	account = "bob" // signed in as bob: a's two are not his
	if ok, err := totals.RunOnce(ctx); !ok || err != nil {
		t.Fatalf("RunOnce after the account changed: %v, %v", ok, err)
	}
	if d := last(); d.AccountID != "bob" || d.AccountCounts[queue.StatePending] != 0 || d.Counts[queue.StatePending] != 2 || d.AccountOldestPendingAgeSeconds != 0 {
		t.Fatalf("bob's totals: %+v", d)
	}
	if ok, _ := totals.RunOnce(ctx); ok {
		t.Fatal("RunOnce with nothing changed appended an event")
	}
	account = "" // signed out: no share
	if ok, err := totals.RunOnce(ctx); !ok || err != nil {
		t.Fatalf("RunOnce after sign-out: %v, %v", ok, err)
	}
	if d := last(); d.AccountID != "" || d.AccountCounts != nil {
		t.Fatalf("signed-out totals: %+v", d)
	}
}

// A logout with the keep policy changes no count, but the account's
// share goes: the loop reports it.
func TestTotalsReportLogout(t *testing.T) {
	t.Parallel()
	totals, bus, s := startTotals(t)
	writeNotes(t, s, 0, 1)
	sub, err := bus.Subscribe(bus.LastSeq(), Filter{Types: []string{EventQueueTotals}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var signedIn atomic.Bool
	signedIn.Store(true)
	totals.SetAccount(func() (string, bool) {
		if signedIn.Load() {
			return "a", true
		}
		return "", false
	})
	totals.Start(context.Background())
	next := func() TotalsData {
		t.Helper()
		select {
		case e, ok := <-sub.C():
			if !ok {
				t.Fatal("subscription closed")
			}
			var d TotalsData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no queue.totals event")
		}
		return TotalsData{}
	}
	if d := next(); d.AccountID != "a" {
		t.Fatalf("after SetAccount: %+v", d)
	}
	signedIn.Store(false)
	// What Logout appends (keep policy: no operation changes).
	if _, err := s.AppendEvent(context.Background(), queue.Event{Type: EventSessionLoggedOut, AccountID: "a"}); err != nil {
		t.Fatal(err)
	}
	if d := next(); d.AccountID != "" || d.AccountCounts != nil || d.Counts[queue.StatePending] != 1 {
		t.Fatalf("after the logout: %+v", d)
	}
}

// startTotals wires a Totals and a Bus to a new store, as syncd run does.
func startTotals(t *testing.T) (*Totals, *Bus, *queue.Store) {
	t.Helper()
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
	return totals, bus, s
}
