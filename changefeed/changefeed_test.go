package changefeed

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memSource is an in-memory Source: positions 1..n, then up to head
// the positions of swept tombstones (head 0: n).
type memSource struct {
	mu      sync.Mutex
	changes []Change
	head    int64
	horizon int64
}

func (s *memSource) add(c Change) {
	s.mu.Lock()
	s.changes = append(s.changes, c)
	s.mu.Unlock()
}

func (s *memSource) Changes(_ context.Context, actor string, after int64, limit int) (Read, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Read{Head: max(s.head, int64(len(s.changes))), Horizon: s.horizon}
	for i := max(after, 0); i < int64(len(s.changes)); i++ {
		if len(r.Changes) == limit {
			r.More = true
			break
		}
		r.Changes = append(r.Changes, s.changes[i])
		r.Positions = append(r.Positions, i+1)
	}
	return r, nil
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
	if code != 200 || len(p.Changes) != 2 || p.Cursor != "2.3" || !p.HasMore || *p.Progress != (Progress{2, 3}) {
		t.Fatalf("first page: %d %+v", code, p)
	}
	if _, p, _ = get(t, h, "after=2.3"); len(p.Changes) != 1 || p.Cursor != "3" || p.HasMore || *p.Progress != (Progress{3, 3}) {
		t.Fatalf("second page: %+v", p)
	}
	if _, p, body := get(t, h, "after=3"); len(p.Changes) != 0 || p.Cursor != "3" || body == "" || *p.Progress != (Progress{3, 3}) {
		t.Fatalf("an empty page at the head: %s", body)
	}
	// The progress of an actor that never wrote, and of a page that
	// ends at a tombstone's swept position above the last record.
	empty := Handler(Config{Source: &memSource{}, Actor: func(*http.Request) (string, error) { return "bob", nil }})
	if _, _, body := get(t, empty, ""); !strings.Contains(body, `"progress":{"at":0,"of":0}`) {
		t.Errorf("an actor with no writes: %s", body)
	}
	src.head = 5
	if _, p, body := get(t, h, "after=3"); p.Cursor != "5" || *p.Progress != (Progress{5, 5}) {
		t.Errorf("a read to a head above the last record: %s", body)
	}
	src.head = 0
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

// TestCursorRules: the last page of a read ends at the head, past swept
// tombstones; the pages of a read from the beginning carry the head it
// began at, so tombstones swept below it do not expire them; "0" is a
// cursor like any other, and no cursor never expires.
func TestCursorRules(t *testing.T) {
	t.Parallel()
	// Three live records at 1..3; tombstones at 4 and 5 were swept.
	src := &memSource{head: 5, horizon: 5}
	for i := range 3 {
		src.add(Change{Type: "note", ClientID: string(rune('a' + i)), Version: 1})
	}
	h := Handler(Config{Source: src, Actor: func(*http.Request) (string, error) { return "alice", nil }})
	cursor := ""
	for i, want := range []string{"1.5", "2.5", "5"} {
		code, p, body := get(t, h, "limit=1&after="+cursor)
		if code != 200 || len(p.Changes) != 1 || p.Cursor != want || p.HasMore != (i < 2) {
			t.Fatalf("page %d after %q: %s, want the cursor %s", i, cursor, body, want)
		}
		cursor = p.Cursor
	}
	if code, p, body := get(t, h, "after=5"); code != 200 || len(p.Changes) != 0 || p.Cursor != "5" {
		t.Fatalf("after the last page: %s", body)
	}
	for _, tt := range []struct {
		q    string
		code int
	}{
		{"after=3", 410},   // below the horizon
		{"after=0", 410},   // "0" too
		{"after=1.4", 410}, // a read that began below the horizon
		{"after=6", 410},   // past the head: another database
		{"after=1.6", 410},
		{"after=", 200}, // no cursor: the beginning
		{"", 200},
	} {
		if code, _, body := get(t, h, tt.q); code != tt.code {
			t.Errorf("%s: %s, want %d", tt.q, body, tt.code)
		}
	}
	empty := Handler(Config{Source: &memSource{}, Actor: func(*http.Request) (string, error) { return "alice", nil }})
	if code, p, body := get(t, empty, ""); code != 200 || p.Cursor != "0" {
		t.Fatalf("an empty feed: %s", body)
	}
	if code, p, body := get(t, empty, "after=0"); code != 200 || p.Cursor != "0" {
		t.Fatalf("an empty feed after 0: %s", body)
	}
}

func TestParseCursor(t *testing.T) {
	t.Parallel()
	for c, want := range map[string]Cursor{
		"":      {},
		"0":     {Set: true},
		"42":    {Set: true, Pos: 42},
		"42.97": {Set: true, Pos: 42, Floor: 97},
		"0.3":   {Set: true, Floor: 3},
	} {
		got, err := ParseCursor(c)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", c, got, err)
		}
		if EncodeCursor(got) != c {
			t.Errorf("%q encodes back as %q", c, EncodeCursor(got))
		}
	}
	for _, c := range []string{"-1", "x", "+5", "007", "1.", ".1", "5.5", "5.3", "1.2.3", "1.x", "99999999999999999999"} {
		if _, err := ParseCursor(c); err == nil {
			t.Errorf("%q parsed", c)
		}
	}
}
