package transport

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

type connCounterKey struct{}

// TestTransparentResend provokes net/http's own resend of a request with
// an Idempotency-Key and checks that Outcome.Sends counts it and that both
// wire attempts carry the same key and body.
//
// It is deterministic: the first Send leaves its connection in the idle
// pool (net/http blocks the reader at body EOF until the connection is
// back in the pool), so the second Send reuses it. The server reads the
// second request whole and closes that connection without answering; the
// client sees EOF before any response byte on a reused connection, and
// because the request carries an Idempotency-Key and a rewindable body,
// net/http resends it on a new connection, where the server answers.
func TestTransparentResend(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		reqs []seen
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.RequestURI, r.Header.Clone(), body})
		mu.Unlock()
		if n := r.Context().Value(connCounterKey{}).(*atomic.Int32).Add(1); n == 2 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close() // FIN after the request was read: no answer
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"srv-`+r.Header.Get("Idempotency-Key")+`"}`)
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connCounterKey{}, new(atomic.Int32))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, nil, Config{BaseURL: srv.URL})

	first := createReq()
	if o := c.Send(t.Context(), first); o.Decision != Done || o.Sends != 1 {
		t.Fatalf("first send: %v, %d sends (%v)", o.Decision, o.Sends, o.Err)
	}
	second := createReq()
	second.OperationID, second.EntityID = "op-2", "local-2"
	o := c.Send(t.Context(), second)
	if o.Decision != Done || o.ServerID != "srv-op-2" {
		t.Fatalf("second send: %v %q (%v)", o.Decision, o.ServerID, o.Err)
	}
	if o.Sends != 2 {
		t.Fatalf("second send: Sends = %d, want 2 (net/http's own resend)", o.Sends)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(reqs) != 3 {
		t.Fatalf("server read %d requests, want 3", len(reqs))
	}
	a, b := reqs[1], reqs[2]
	for _, s := range []seen{a, b} {
		checkHeaders(t, s, second)
	}
	if string(a.Body) != string(b.Body) || len(a.Body) == 0 {
		t.Errorf("resent body %q differs from %q", b.Body, a.Body)
	}
	jsonEqual(t, b.Body, `{"clientId":"local-2","data":{"title":"hi"},"payloadVersion":3}`)
}
