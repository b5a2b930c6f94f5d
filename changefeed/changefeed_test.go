package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memSource is an in-memory Source: positions 1..n.
type memSource struct {
	mu      sync.Mutex
	changes []Change
	horizon int64
}

func (s *memSource) add(c Change) {
	s.mu.Lock()
	s.changes = append(s.changes, c)
	s.mu.Unlock()
}

func (s *memSource) Changes(_ context.Context, actor string, after int64, limit int) ([]Change, []int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after > 0 && (after < s.horizon || after > int64(len(s.changes))) {
		return nil, nil, false, ErrCursorExpired
	}
	var out []Change
	var pos []int64
	for i := after; i < int64(len(s.changes)); i++ {
		if len(out) == limit {
			return out, pos, true, nil
		}
		out = append(out, s.changes[i])
		pos = append(pos, i+1)
	}
	return out, pos, false, nil
}

func get(t *testing.T, h http.Handler, query string) (int, Page, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest("GET", "/v1/changes?"+query, nil))
	var p Page
	json.Unmarshal(rr.Body.Bytes(), &p)
	return rr.Code, p, rr.Body.String()
}

func TestHandler(t *testing.T) {
	t.Parallel()
	src := &memSource{}
	for i := range 3 {
		src.add(Change{Type: "note", ID: "s", ClientID: string(rune('a' + i)), Version: 1})
	}
	n := &Notifier{}
	h := Handler(Config{Source: src, Notifier: n, Actor: func(*http.Request) (string, error) { return "alice", nil }})
	code, p, _ := get(t, h, "limit=2")
	if code != 200 || len(p.Changes) != 2 || p.Cursor != "2" || !p.HasMore {
		t.Fatalf("first page: %d %+v", code, p)
	}
	if _, p, _ = get(t, h, "after=2"); len(p.Changes) != 1 || p.Cursor != "3" || p.HasMore {
		t.Fatalf("second page: %+v", p)
	}
	if _, p, body := get(t, h, "after=3"); len(p.Changes) != 0 || p.Cursor != "3" || body == "" {
		t.Fatalf("empty page keeps the cursor: %s", body)
	}
	for _, tt := range []struct {
		q    string
		code int
	}{{"after=x", 400}, {"limit=-1", 400}, {"wait=x", 400}, {"after=9", 410}} {
		if code, _, body := get(t, h, tt.q); code != tt.code {
			t.Errorf("%s: %d %s", tt.q, code, body)
		}
	}
	src.horizon = 2
	if code, _, _ := get(t, h, "after=1"); code != 410 {
		t.Errorf("below the horizon: %d", code)
	}
	if code, _, _ := get(t, h, ""); code != 200 {
		t.Errorf("a full read below the horizon: %d", code)
	}
	noActor := Handler(Config{Source: src, Actor: func(*http.Request) (string, error) { return "", errors.New("no") }})
	if code, _, _ := get(t, noActor, ""); code != 401 {
		t.Errorf("no actor: %d", code)
	}
}

// A long poll answers when its actor's change is notified, and at
// Close; a notification for another actor leaves it waiting.
func TestLongPollWakes(t *testing.T) {
	t.Parallel()
	src := &memSource{}
	n := &Notifier{}
	h := Handler(Config{Source: src, Notifier: n, Actor: func(*http.Request) (string, error) { return "alice", nil }})
	done := make(chan Page, 1)
	go func() {
		_, p, _ := get(t, h, "wait=60")
		done <- p
	}()
	// The poll registers before it reads: a Notify from here on wakes it.
	n.Notify("bob")
	src.add(Change{Type: "note", ClientID: "a", Version: 1})
	for {
		n.Notify("alice")
		select {
		case p := <-done:
			if len(p.Changes) != 1 {
				t.Fatalf("woken page %+v", p)
			}
			goto closed
		default:
		}
	}
closed:
	go func() {
		_, p, _ := get(t, h, "after=1&wait=60")
		done <- p
	}()
	n.Close()
	if p := <-done; len(p.Changes) != 0 || p.Cursor != "1" {
		t.Fatalf("poll at Close: %+v", p)
	}
	// After Close, polls do not wait.
	if _, p, _ := get(t, h, "after=1&wait=60"); p.Cursor != "1" {
		t.Fatalf("poll after Close: %+v", p)
	}
}

func TestParseCursor(t *testing.T) {
	t.Parallel()
	for c, want := range map[string]int64{"": 0, "0": 0, "42": 42} {
		if got, err := ParseCursor(c); err != nil || got != want {
			t.Errorf("%q: %d %v", c, got, err)
		}
	}
	for _, c := range []string{"-1", "x", "1.5", "99999999999999999999"} {
		if _, err := ParseCursor(c); err == nil {
			t.Errorf("%q parsed", c)
		}
	}
	if EncodeCursor(7) != "7" {
		t.Error("EncodeCursor")
	}
}
