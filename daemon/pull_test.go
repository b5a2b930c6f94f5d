package daemon

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// fakeFeed is a remote that serves only GET /v1/changes, with answers the
// test chooses per request.
type fakeFeed struct {
	mu      sync.Mutex
	tokens  []string
	queries []string
	answer  func(token, after string) (int, string)
	hits    chan string
}

func startPuller(t *testing.T, mode PullMode, answer func(token, after string) (int, string)) (*Daemon, *fakeFeed, *eventLog) {
	return startPullerWith(t, mode, transport.Config{}, answer)
}

func startPullerWith(t *testing.T, mode PullMode, tcfg transport.Config, answer func(token, after string) (int, string)) (*Daemon, *fakeFeed, *eventLog) {
	t.Helper()
	f := &fakeFeed{answer: answer, hits: make(chan string, 100)}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/changes" {
			http.NotFound(w, r)
			return
		}
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		f.mu.Lock()
		f.tokens = append(f.tokens, tok)
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		status, body := f.answer(tok, r.URL.Query().Get("after")+"|"+r.URL.Query().Get("limit"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
		select {
		case f.hits <- tok:
		default:
		}
	}))
	t.Cleanup(hs.Close)
	events := newEventLog()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{OnCommit: events.add, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	tcfg.BaseURL = hs.URL
	client, err := transport.New(tcfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{Store: store, Transport: client, Logger: testLogger(t), Pull: mode, PullWait: time.Second,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Stop(ctx)
		client.CloseIdleConnections()
		store.Close()
	})
	return d, f, events
}

func waitPull(t *testing.T, d *Daemon, what string, cond func(PullStatus) bool) PullStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := d.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cond(st.Pull) {
			return st.Pull
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v", what, st.Pull)
		}
		time.Sleep(5 * time.Millisecond) // the puller's state lives in memory: polled
	}
}

// A remote without a feed (404) is push-only with pull auto: the pull is
// off after one request, not retried in a loop.
func TestPullNoFeedIsOneWay(t *testing.T) {
	t.Parallel()
	d, f, _ := startPuller(t, PullAuto, func(string, string) (int, string) {
		return 404, `{"error":{"code":"not_found","message":"no such route"}}`
	})
	waitPull(t, d, "off", func(p PullStatus) bool { return p.State == PullStateOff && p.Mode == PullAuto })
	f.mu.Lock()
	n := len(f.tokens)
	f.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d feed requests, want 1 (then an hour's wait)", n)
	}
}

// With pull on, a 404 is an error, retried with backoff.
func TestPullOnRetriesErrors(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fail := true
	d, _, _ := startPuller(t, PullOn, func(_, after string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return 503, `{"error":{"code":"unavailable","message":"later"}}`
		}
		if strings.HasPrefix(after, "1|") {
			return 200, `{"changes":[],"cursor":"1","hasMore":false}`
		}
		return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"v":1},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":false}`
	})
	waitPull(t, d, "error", func(p PullStatus) bool { return p.State == PullStateError && strings.Contains(p.LastError, "503") })
	mu.Lock()
	fail = false
	mu.Unlock()
	p := waitPull(t, d, "idle", func(p PullStatus) bool { return p.State == PullStateIdle && p.Received == 1 })
	if p.LastPullAt.IsZero() {
		t.Fatalf("%+v", p)
	}
	if e, err := d.Store().GetEntity("alice", "note", "n1"); err != nil || e.SyncState != queue.SyncSynced {
		t.Fatalf("pulled entity: %+v %v", e, err)
	}
}

// A refused token pauses the pull (and the sends) with
// session.refresh_needed; a new token resumes it, with the new token.
func TestPullRefusedTokenPauses(t *testing.T) {
	t.Parallel()
	d, f, events := startPuller(t, PullOn, func(tok, after string) (int, string) {
		if tok == "alice.1" {
			return 401, `{"error":{"code":"unauthorized","message":"expired"}}`
		}
		return 200, `{"changes":[],"cursor":"","hasMore":false}`
	})
	events.wait(t, "refresh_needed", func(es []queue.Event) bool {
		for _, e := range es {
			if e.Type == EventSessionRefreshNeeded {
				return true
			}
		}
		return false
	})
	waitPull(t, d, "paused", func(p PullStatus) bool { return p.State == PullStatePaused })
	if st, _ := d.Status(context.Background()); !st.Paused || st.PauseReason != PauseSessionRefreshNeeded {
		t.Fatalf("status %+v", st)
	}
	if err := d.SetSession(context.Background(), "alice", "alice.2"); err != nil {
		t.Fatal(err)
	}
	waitPull(t, d, "idle with the new token", func(p PullStatus) bool { return p.State == PullStateIdle })
	f.mu.Lock()
	defer f.mu.Unlock()
	if last := f.tokens[len(f.tokens)-1]; last != "alice.2" {
		t.Fatalf("tokens %v", f.tokens)
	}
	if n := strings.Count(strings.Join(f.tokens, ","), "alice.1"); n != 1 {
		t.Fatalf("the refused token was sent %d times: %v", n, f.tokens)
	}
}

// Pages too big to read are asked for again with fewer records, down to
// one at a time: a feed of big records does not stop the pull.
func TestPullHalvesTooBigPages(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3000)
	d, _, _ := startPullerWith(t, PullOn, transport.Config{MaxResponseBytes: 1000}, func(_, q string) (int, string) {
		after, limit, _ := strings.Cut(q, "|")
		if after != "" {
			return 200, `{"changes":[],"cursor":"` + after + `","hasMore":false}`
		}
		if limit != "1" {
			// Two records of 3,000 bytes: over the 4,000 a page may take.
			return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"x":"` + big + `"},"updatedAt":"2026-12-04T00:00:00Z"},{"type":"note","id":"s2","clientId":"n2","version":1,"data":{"x":"` + big + `"},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"2","hasMore":false}`
		}
		return 200, `{"changes":[{"type":"note","id":"s1","clientId":"n1","version":1,"data":{"x":"` + big + `"},"updatedAt":"2026-12-04T00:00:00Z"}],"cursor":"1","hasMore":false}`
	})
	waitPull(t, d, "the record pulled", func(p PullStatus) bool { return p.Received == 1 && p.State == PullStateIdle })
}

// A server with nothing for the account, which answers an empty cursor,
// is long-polled once the first (empty) pass ended: not read again in a
// loop.
func TestPullEmptyFeedIsLongPolled(t *testing.T) {
	t.Parallel()
	d, f, _ := startPuller(t, PullOn, func(string, string) (int, string) {
		return 200, `{"changes":[],"cursor":"","hasMore":false}`
	})
	waitPull(t, d, "idle", func(p PullStatus) bool { return p.State == PullStateIdle })
	for range 3 {
		<-f.hits
	}
	// After the first read, every read is a long poll: a pass begun
	// again each time would read without waiting.
	f.mu.Lock()
	qs := slices.Clone(f.queries)
	f.mu.Unlock()
	for i, q := range qs[1:] {
		if !strings.Contains(q, "wait=") {
			t.Fatalf("read %d was not a long poll: %s (all: %q)", i+2, q, qs)
		}
	}
	st, _ := d.Store().LoadPullState("alice")
	if !st.Bootstrapped || st.FullPass {
		t.Fatalf("pull state %+v", st)
	}
}
