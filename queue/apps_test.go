package queue

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func testDigest(c byte) string { return strings.Repeat(string(c), 64) }

func TestAppRegistry(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t, Config{})
	a, err := s.AddApp(ctx, App{Name: "notes", Types: []string{"task", "note"}, TokenDigest: testDigest('a')})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Types, ",") != "note,task" || a.CreatedAt.IsZero() {
		t.Fatalf("stored app %+v: want sorted types and a creation time", a)
	}
	if _, err := s.AddApp(ctx, App{Name: "notes", Types: []string{"x"}, TokenDigest: testDigest('b')}); !errors.Is(err, ErrAppExists) {
		t.Fatalf("second app of one name: %v, want ErrAppExists", err)
	}
	for _, bad := range []App{
		{Name: "", Types: []string{"x"}, TokenDigest: testDigest('c')},
		{Name: "-x", Types: []string{"x"}, TokenDigest: testDigest('c')},
		{Name: "a/b", Types: []string{"x"}, TokenDigest: testDigest('c')},
		{Name: strings.Repeat("a", MaxAppNameLen+1), Types: []string{"x"}, TokenDigest: testDigest('c')},
		{Name: "ok", Types: nil, TokenDigest: testDigest('c')},
		{Name: "ok", Types: []string{"x", "x"}, TokenDigest: testDigest('c')},
		{Name: "ok", Types: []string{"a b"}, TokenDigest: testDigest('c')},
		{Name: "ok", Types: []string{"x"}, TokenDigest: "zz"},
		{Name: "ok", Types: []string{"x"}, TokenDigest: testDigest('g')},
	} {
		if _, err := s.AddApp(ctx, bad); !errors.Is(err, ErrInvalidApp) {
			t.Errorf("AddApp(%+v): %v, want ErrInvalidApp", bad, err)
		}
	}
	apps, err := s.Apps()
	if err != nil || len(apps) != 1 || apps[0].Name != "notes" {
		t.Fatalf("Apps() = %+v, %v; want notes alone", apps, err)
	}
	if err := s.RemoveApp(ctx, "notes"); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveApp(ctx, "notes"); !errors.Is(err, ErrAppNotFound) {
		t.Fatalf("second remove: %v, want ErrAppNotFound", err)
	}
	if apps, _ := s.Apps(); len(apps) != 0 {
		t.Fatalf("apps after remove: %+v", apps)
	}
}

// An operation keeps the app that made it, in its row, its events and
// the counts per app; the counts per entity type follow its state; the
// list filters by type.
func TestOperationRecordsItsApp(t *testing.T) {
	ctx := context.Background()
	var seen []Event
	s, _ := setup(t, Config{OnCommit: func(es []Event) { seen = append(seen, es...) }})
	note := mustApply(t, s, Write{Op: OpCreate, EntityType: "note", Data: json.RawMessage(`{"a":1}`), App: "notes"})
	mustApply(t, s, Write{Op: OpCreate, EntityType: "task", Data: json.RawMessage(`{"a":1}`), App: "tasks"})
	mustApply(t, s, Write{Op: OpCreate, EntityType: "task", Data: json.RawMessage(`{"a":2}`)})
	mustApply(t, s, Write{Op: OpCreate, AccountID: "other", EntityType: "note", Data: json.RawMessage(`{"a":3}`), App: "notes"})

	op, err := s.GetOperation(note.Operation.ID)
	if err != nil || op.App != "notes" {
		t.Fatalf("operation %+v, %v: want app notes", op, err)
	}
	var apps []string
	for _, e := range seen {
		if e.Type == EventOperationState {
			apps = append(apps, e.App)
		}
	}
	if strings.Join(apps, ",") != "notes,tasks,,notes" {
		t.Fatalf("operation.state events' apps %q", apps)
	}

	byApp, err := s.AppCounts()
	if err != nil {
		t.Fatal(err)
	}
	if byApp["notes"][StatePending] != 2 || byApp["tasks"][StatePending] != 1 || len(byApp) != 2 {
		t.Fatalf("AppCounts = %v", byApp)
	}
	all, acct, err := s.TypeCounts("acct", []string{"note"})
	if err != nil || all[StatePending] != 2 || acct[StatePending] != 1 {
		t.Fatalf("TypeCounts(acct, note) = %v, %v, %v; want 2 in all, 1 in acct", all, acct, err)
	}
	all, _, _ = s.TypeCounts("", []string{"note", "task"})
	if all[StatePending] != 4 {
		t.Fatalf("TypeCounts(note, task) = %v, want 4 pending", all)
	}

	// Done: the counts move with the state.
	claimed, err := s.Claim(ctx, "acct", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, claimed.ID, "w", Completion{}); err != nil {
		t.Fatal(err)
	}
	byApp, _ = s.AppCounts()
	if byApp["notes"][StatePending]+byApp["tasks"][StatePending] != 2 || byApp["notes"][StateDone]+byApp["tasks"][StateDone] != 1 {
		t.Fatalf("AppCounts after one done = %v", byApp)
	}

	ops, _, err := s.ListOperations(ListOptions{EntityTypes: []string{"task"}})
	if err != nil || len(ops) != 2 {
		t.Fatalf("ListOperations(task) = %d ops, %v", len(ops), err)
	}
	for _, op := range ops {
		if op.EntityType != "task" {
			t.Fatalf("listed %s", op.EntityType)
		}
	}
	if ops, _, _ := s.ListOperations(ListOptions{EntityTypes: []string{}}); len(ops) != 0 {
		t.Fatalf("an empty, non-nil type filter listed %d", len(ops))
	}
	counts := map[State]int{}
	for _, c := range byApp {
		for st, n := range c {
			counts[st] += n
		}
	}
	if !maps.Equal(counts, map[State]int{StatePending: 2, StateDone: 1}) {
		t.Fatalf("per-app counts %v", counts)
	}
}
