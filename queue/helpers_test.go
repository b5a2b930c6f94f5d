package queue

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/syncd/syncd/internal/clocktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if crashChild() || upgradeChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is the injected clock: time moves only when a test says so.
type fakeClock = clocktest.Clock

func newClock() *fakeClock { return clocktest.New() }

// setup opens a fresh store in t.TempDir() and, at cleanup, closes it and
// checks the file's consistency and every queue invariant.
func setup(t testing.TB, cfg Config) (*Store, *fakeClock) {
	t.Helper()
	clock := newClock()
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("invariants after test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, clock
}

func mustApply(t testing.TB, s *Store, w Write) Result {
	t.Helper()
	if w.AccountID == "" {
		w.AccountID = "acct"
	}
	if w.EntityType == "" {
		w.EntityType = "note"
	}
	r, err := s.Apply(context.Background(), w)
	if err != nil {
		t.Fatalf("apply %+v: %v", w, err)
	}
	return r
}

func create(t testing.TB, s *Store, id, data string) Result {
	t.Helper()
	return mustApply(t, s, Write{Op: OpCreate, EntityID: id, Data: json.RawMessage(data)})
}

func mustCheck(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
