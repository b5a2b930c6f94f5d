package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/syncd/syncd/remote"
)

// TestBootstrapSurvivesSIGKILL: a new device's bootstrap (1,500 records,
// three pages) is SIGKILLed after its first page; started again, it goes
// on from the saved cursor (not from the beginning) and ends with
// exactly the server's records, none lost, none twice, none removed by
// the end of the pass.
func TestBootstrapSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	srv, err := remote.New(remote.Config{Path: filepath.Join(t.TempDir(), "remote.db"), DevTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	var (
		mu     sync.Mutex
		afters []string
		hold   = make(chan struct{})
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/changes" {
			after := r.URL.Query().Get("after")
			mu.Lock()
			afters = append(afters, after)
			mu.Unlock()
			if after != "" {
				select { // the second page waits until the kill
				case <-hold:
				case <-r.Context().Done():
					return
				}
			}
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close) // after the daemon's kill (cleanups run last first)

	const n = 1500
	hc := &http.Client{}
	for i := range n {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/notes", strings.NewReader(fmt.Sprintf(`{"clientId":"n%04d","data":{"i":%d}}`, i, i)))
		req.Header.Set("Authorization", "Bearer alice.A")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		res, err := hc.Do(req)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("seed %d: %v %v", i, res, err)
		}
		res.Body.Close()
	}

	dir := filepath.Join(t.TempDir(), "data") // syncd makes it 0700, as its socket needs
	p := startRun(t, dir, "--remote", hs.URL, "--pull", "on")
	if code, _ := p.call(t, "PUT", "/v1/session", `{"accountId":"alice","accessToken":"alice.B"}`); code != 200 {
		t.Fatalf("session: %d", code)
	}
	pull := waitStatus(t, p, "the first page applied", func(pull map[string]any) bool {
		return pull["state"] == "bootstrapping" && pull["bootstrapReceived"] == float64(500)
	})
	// The server's pages say where they end: the first of three, by the
	// feed's positions (one per create here).
	if pull["bootstrapProgress"] != 500.0/1500 || pull["lastReadAt"] == nil {
		t.Errorf("pull status during the bootstrap: %v; want bootstrapProgress %v and lastReadAt", pull, 500.0/1500)
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	close(hold)

	mu.Lock()
	before := len(afters)
	mu.Unlock()
	p = startRun(t, dir, "--remote", hs.URL, "--pull", "on")
	waitStatus(t, p, "the bootstrap done", func(pull map[string]any) bool {
		return pull["state"] == "idle"
	})
	mu.Lock()
	resumedAt := afters[before]
	mu.Unlock()
	if resumedAt == "" {
		t.Fatalf("the restarted bootstrap read from the beginning, not from its cursor (requests: %q)", afters)
	}
	// Every record, once, with its data, synced.
	seen := map[string]bool{}
	after := ""
	for {
		code, page := p.call(t, "GET", "/v1/entities/notes?limit=500&after="+after, "")
		if code != 200 {
			t.Fatalf("list: %d %v", code, page)
		}
		for _, it := range page["items"].([]any) {
			e := it.(map[string]any)
			id := e["id"].(string)
			if seen[id] {
				t.Fatalf("%s listed twice", id)
			}
			seen[id] = true
			var i int
			fmt.Sscanf(id, "n%04d", &i)
			if d := e["data"].(map[string]any); d["i"] != float64(i) || e["syncState"] != "synced" {
				t.Fatalf("%s: %v", id, e)
			}
		}
		next, _ := page["next"].(string)
		if next == "" {
			break
		}
		after = next
	}
	if len(seen) != n {
		t.Fatalf("%d records after the bootstrap, want %d", len(seen), n)
	}
	p.stop(t)
}

// waitStatus polls the daemon's status until cond holds of its pull, and
// returns that pull.
func waitStatus(t *testing.T, p *daemonProc, what string, cond func(pull map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, st := p.call(t, "GET", "/v1/status", "")
		pull, _ := st["pull"].(map[string]any)
		if pull != nil && cond(pull) {
			return pull
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: pull %v", what, pull)
		}
		time.Sleep(20 * time.Millisecond) // polling a subprocess's status
	}
}
