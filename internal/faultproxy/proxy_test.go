package faultproxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestActions(t *testing.T) {
	var hits atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(201)
		io.WriteString(w, `{"id":"x"}`)
	}))
	defer backend.Close()
	p, err := New(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hold := make(chan struct{})
	p.SetRule(func(r Request) Action {
		switch r.Key {
		case "drop":
			return Action{Kind: DropResponse}
		case "reset":
			return Action{Kind: Reset}
		case "429":
			return Action{Kind: Respond, Status: 429, RetryAfter: "7"}
		case "delay":
			return Action{Kind: Delay, Delay: time.Millisecond}
		case "hold":
			return Action{Kind: Hold, Hold: hold}
		}
		return Action{}
	})
	// A fresh connection per request: net/http would resend a request
	// with an Idempotency-Key on a reused one that died.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	do := func(key string) (*http.Response, error) {
		req, _ := http.NewRequest("POST", p.URL()+"/v1/note", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer alice.1")
		resp, err := hc.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	if resp, err := do("ok"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("forward: %v %v", resp, err)
	}
	if _, err := do("drop"); err == nil {
		t.Fatal("drop: got an answer")
	}
	if _, err := do("reset"); err == nil {
		t.Fatal("reset: got an answer")
	}
	resp, err := do("429")
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" {
		t.Fatalf("429: %v %v", resp, err)
	}
	if resp, err := do("delay"); err != nil || resp.StatusCode != 201 {
		t.Fatalf("delay: %v %v", resp, err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := do("hold")
		held <- err
	}()
	if err := p.Wait(t.Context(), func(l []Entry) bool { return Count(l, func(e Entry) bool { return e.Key == "hold" }) == 1 }); err != nil {
		t.Fatal(err)
	}
	if hits.Load() != 3 {
		t.Fatalf("backend hits %d before the hold is released, want 3", hits.Load())
	}
	close(hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}

	log := p.Log()
	want := []struct {
		key       string
		forwarded bool
		delivered bool
	}{{"ok", true, true}, {"drop", true, false}, {"reset", false, false}, {"429", false, true}, {"delay", true, true}, {"hold", true, true}}
	if len(log) != len(want) {
		t.Fatalf("log has %d entries", len(log))
	}
	for i, w := range want {
		e := log[i]
		if e.Key != w.key || e.Forwarded != w.forwarded || e.Delivered != w.delivered || e.Token != "alice.1" || e.KeySeen != 1 {
			t.Errorf("entry %d: %+v, want %+v", i, e, w)
		}
	}
	hc.CloseIdleConnections()
}
