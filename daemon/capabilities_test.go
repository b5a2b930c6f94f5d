package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/faultproxy"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// capsServer is a remote on loopback: the reference server's routes
// behind a handler that answers GET /v1/capabilities as a test says,
// and holds POST /v1/batch to the limits it advertised (413 above them,
// as a server would).
type capsServer struct {
	mu      sync.Mutex
	answer  func(w http.ResponseWriter) // GET /v1/capabilities; nil: the reference server's
	maxOps  int                         // 0: not checked
	maxSize int
	batches []batchSeen
}

type batchSeen struct{ ops, bytes int }

func (cs *capsServer) set(answer func(w http.ResponseWriter), maxOps, maxSize int) {
	cs.mu.Lock()
	cs.answer, cs.maxOps, cs.maxSize = answer, maxOps, maxSize
	cs.mu.Unlock()
}

func (cs *capsServer) seen() []batchSeen {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]batchSeen(nil), cs.batches...)
}

// serve puts cs between e's proxy and its reference server.
func (cs *capsServer) serve(e *env) {
	ref := e.remote.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		answer, maxOps, maxSize := cs.answer, cs.maxOps, cs.maxSize
		cs.mu.Unlock()
		switch {
		case r.Method == "GET" && r.URL.Path == transport.CapabilitiesPath && answer != nil:
			answer(w)
			return
		case r.Method == "POST" && r.URL.Path == transport.BatchPath:
			body, _ := io.ReadAll(r.Body)
			var b struct{ Operations []json.RawMessage }
			json.Unmarshal(body, &b)
			cs.mu.Lock()
			cs.batches = append(cs.batches, batchSeen{len(b.Operations), len(body)})
			cs.mu.Unlock()
			if (maxOps > 0 && len(b.Operations) > maxOps) || (maxSize > 0 && len(body) > maxSize) {
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		ref.ServeHTTP(w, r)
	}))
	e.t.Cleanup(hs.Close)
	e.proxy.SetTarget(hs.URL)
}

func answerJSON(status int, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// requests counts the requests the proxy saw of a method and path
// (without its query).
func requests(e *env, method, path string) int {
	return countRequests(e.proxy.Log(), method, path)
}

func countRequests(log []faultproxy.Entry, method, path string) int {
	return faultproxy.Count(log, func(l faultproxy.Entry) bool {
		p, _, _ := strings.Cut(l.Request.Path, "?")
		return l.Request.Method == method && p == path
	})
}

// settled waits until no operation is pending, sending or waiting for a
// retry, and checks that every one is done.
func settled(t *testing.T, e *env, want int) {
	t.Helper()
	e.events.wait(t, "everything settled", func([]queue.Event) bool {
		st, err := e.store.Stats()
		return err == nil && st.Counts[queue.StatePending]+st.Counts[queue.StateSending]+st.Counts[queue.StateRetryWaiting] == 0
	})
	st, _ := e.store.Stats()
	if st.Counts[queue.StateDone] != want {
		t.Fatalf("counts %v, want %d done", st.Counts, want)
	}
}

// TestNoCapabilitiesNoBatch: a remote without GET /v1/capabilities (a
// 404, or a backend whose generic GET /v1/{type} lists records of a type
// named "capabilities") never gets a POST /v1/batch, even with batch
// on: every operation goes alone. Pull auto still reads its feed (a
// GET).
func TestNoCapabilitiesNoBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"404", answerJSON(404, `{"error":{"code":"not_found","message":"no such route"}}`)},
		{"generic list", answerJSON(200, `{"items":[]}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchOn, Pull: PullAuto, Concurrency: 4}})
			cs := &capsServer{}
			cs.set(tc.answer, 0, 0)
			cs.serve(e)
			ws := make([]queue.Write, 30)
			for i := range ws {
				ws[i] = queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("n%02d", i), Data: json.RawMessage(`{}`)}
			}
			if _, err := e.store.ApplyBatch(t.Context(), ws, false); err != nil {
				t.Fatal(err)
			}
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			settled(t, e, 30)
			if n := requests(e, "POST", transport.BatchPath); n != 0 || len(cs.seen()) != 0 {
				t.Fatalf("%d batch requests to a remote that advertises none", n)
			}
			if n := requests(e, "POST", "/v1/note"); n != 30 {
				t.Fatalf("%d single creates, want 30", n)
			}
			if n := requests(e, "GET", transport.CapabilitiesPath); n != 1 {
				t.Fatalf("capabilities read %d times, want once", n)
			}
			if err := e.proxy.Wait(t.Context(), func(log []faultproxy.Entry) bool {
				return countRequests(log, "GET", transport.ChangesPath) > 0
			}); err != nil {
				t.Fatal("pull auto did not try the feed of a remote that advertises nothing")
			}
		})
	}
}

// TestCapabilitiesSizeBatches: a remote that advertises small limits
// gets batches within them, and within the daemon's own when those are
// smaller; an operation too big for any batch goes alone. Its "changes":
// false keeps pull auto from reading the feed; pull on reads it anyway.
func TestCapabilitiesSizeBatches(t *testing.T) {
	t.Parallel()
	const maxBytes = 1500
	for _, tc := range []struct {
		name     string
		own      int
		pull     PullMode
		wantOps  int
		wantFeed bool
	}{
		{"advertised", 0, PullAuto, 3, false},
		{"own smaller", 2, PullOn, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchAuto, BatchSize: tc.own, Pull: tc.pull, Concurrency: 2}})
			cs := &capsServer{}
			cs.set(answerJSON(200, fmt.Sprintf(`{"batch":{"maxOperations":3,"maxBytes":%d},"changes":false}`, maxBytes)), 3, maxBytes)
			cs.serve(e)
			var ws []queue.Write
			for i := range 40 {
				pad := strings.Repeat("x", (i%4)*150) // items of about 150 to 600 bytes
				ws = append(ws, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("n%02d", i), Data: json.RawMessage(`{"pad":"` + pad + `"}`)})
			}
			big := strings.Repeat("y", maxBytes)
			ws = append(ws, queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: "big", Data: json.RawMessage(`{"pad":"` + big + `"}`)})
			if _, err := e.store.ApplyBatch(t.Context(), ws, false); err != nil {
				t.Fatal(err)
			}
			if err := e.d.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			settled(t, e, len(ws))
			batches := cs.seen()
			if len(batches) == 0 {
				t.Fatal("no batch sent to a remote that advertises them")
			}
			ops := 0
			for _, b := range batches {
				if b.ops > tc.wantOps || b.bytes > maxBytes || b.ops < 2 {
					t.Fatalf("a batch of %d operations, %d bytes: want 2 to %d and at most %d bytes", b.ops, b.bytes, tc.wantOps, maxBytes)
				}
				ops += b.ops
			}
			singles := requests(e, "POST", "/v1/note")
			if ops+singles != len(ws) {
				t.Fatalf("%d batched and %d single creates for %d operations", ops, singles, len(ws))
			}
			for _, l := range e.proxy.Log() {
				if bytes.Contains(l.Request.Body, []byte(big)) && l.Request.Path != "/v1/note" {
					t.Fatalf("the operation too big for a batch went to %s", l.Request.Path)
				}
			}
			t.Logf("%d batches of %d operations, %d single requests", len(batches), ops, singles)

			if !tc.wantFeed {
				if n := requests(e, "GET", transport.ChangesPath); n != 0 {
					t.Fatalf("pull auto read the feed %d times of a remote that says changes: false", n)
				}
				if st, _ := e.d.Status(t.Context()); st.Pull.State != PullStateOff {
					t.Fatalf("pull state %q, want off", st.Pull.State)
				}
				return
			}
			if err := e.proxy.Wait(t.Context(), func(log []faultproxy.Entry) bool {
				return countRequests(log, "GET", transport.ChangesPath) > 0
			}); err != nil {
				t.Fatal("pull on did not read the feed")
			}
		})
	}
}

// TestCapabilitiesOfReferenceServer: the reference server advertises
// its own limits (100 operations), which the daemon keeps to although
// its own allow more.
func TestCapabilitiesOfReferenceServer(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{realClock: true, cfg: Config{Batch: BatchAuto, BatchSize: 300, Concurrency: 1}})
	ws := make([]queue.Write, 250)
	for i := range ws {
		ws[i] = queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("n%03d", i), Data: json.RawMessage(`{}`)}
	}
	if _, err := e.store.ApplyBatch(t.Context(), ws, false); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	settled(t, e, len(ws))
	batches := 0
	for _, l := range e.proxy.Log() {
		if l.Request.Path != transport.BatchPath {
			continue
		}
		batches++
		var b struct{ Operations []json.RawMessage }
		json.Unmarshal(l.Request.Body, &b)
		if len(b.Operations) > 100 || l.Status != http.StatusOK {
			t.Fatalf("a batch of %d operations answered %d", len(b.Operations), l.Status)
		}
	}
	if batches < 3 {
		t.Fatalf("%d batches for 250 operations", batches)
	}
	if n := requests(e, "GET", transport.CapabilitiesPath); n != 1 {
		t.Fatalf("capabilities read %d times", n)
	}
}

// TestCapabilitiesReread: a read that gets no answer is tried again
// after a backoff, not taken for "none"; an answer is kept an hour, then
// read again. Time is the injected clock's.
func TestCapabilitiesReread(t *testing.T) {
	t.Parallel()
	e := setup(t, envOpts{cfg: Config{Batch: BatchOn, Concurrency: 1,
		Policy: transport.Policy{Backoff: transport.Backoff{Base: time.Second, Max: time.Second}}}})
	cs := &capsServer{}
	cs.set(answerJSON(404, `{}`), 0, 0)
	cs.serve(e)
	var capsReads int
	e.proxy.SetRule(func(r faultproxy.Request) faultproxy.Action {
		if r.Path == transport.CapabilitiesPath {
			capsReads++ // under the proxy's lock
			if capsReads == 1 {
				return faultproxy.Action{Kind: faultproxy.Reset}
			}
		}
		return faultproxy.Action{Kind: faultproxy.Forward}
	})
	total := 0
	round := func(what string, wantReads, wantBatches int) {
		t.Helper()
		ws := make([]queue.Write, 10)
		for i := range ws {
			ws[i] = queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: fmt.Sprintf("%s%02d", strings.ReplaceAll(what, " ", "-"), i), Data: json.RawMessage(`{}`)}
		}
		if _, err := e.store.ApplyBatch(t.Context(), ws, false); err != nil {
			t.Fatal(err)
		}
		total += len(ws)
		e.d.Notify()
		settled(t, e, total)
		if n := requests(e, "GET", transport.CapabilitiesPath); n != wantReads {
			t.Fatalf("%s: capabilities read %d times, want %d", what, n, wantReads)
		}
		if n := len(cs.seen()); n != wantBatches {
			t.Fatalf("%s: %d batch requests, want %d", what, n, wantBatches)
		}
	}
	if err := e.d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	round("no answer", 1, 0) // the read failed: single requests

	e.clock.Advance(time.Second)
	round("none", 2, 0) // read again after the backoff: 404, nothing advertised

	cs.set(answerJSON(200, `{"batch":{"maxOperations":100,"maxBytes":1000000}}`), 0, 0)
	e.clock.Advance(59 * time.Minute)
	round("within the hour", 2, 0) // the 404 is kept an hour

	e.clock.Advance(time.Minute)
	round("an hour later", 3, 2) // read again: advertised, batches of 8 and 2 (the window starts at 8)
}
