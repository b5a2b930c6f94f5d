package transport

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// Probe is a HEAD of the base URL without credentials; any answer gives
// its status, no answer an error.
func TestProbe(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, reply(http.StatusNotFound, ""))
	c := newClient(t, rm, Config{BaseURL: rm.URL + "/api"})
	status, err := c.Probe(t.Context())
	if err != nil || status != http.StatusNotFound {
		t.Fatalf("Probe = %d, %v; want 404, nil", status, err)
	}
	reqs := rm.requests()
	if len(reqs) != 1 || reqs[0].Method != http.MethodHead || reqs[0].RequestURI != "/api/" {
		t.Fatalf("requests: %+v", reqs)
	}
	if h := reqs[0].Header; h.Get("Authorization") != "" || h.Get("Idempotency-Key") != "" || h.Get("User-Agent") != DefaultUserAgent {
		t.Errorf("probe headers: %v", h)
	}

	unavailable := newRemote(t, reply(http.StatusServiceUnavailable, "", "Retry-After", "30"))
	if status, err := newClient(t, unavailable, Config{}).Probe(t.Context()); err != nil || status != http.StatusServiceUnavailable {
		t.Errorf("Probe of a 503 = %d, %v", status, err)
	}

	// Nothing listens: a network error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if status, err := newClient(t, nil, Config{BaseURL: "http://" + addr}).Probe(t.Context()); err == nil || status != 0 {
		t.Errorf("Probe of a closed port = %d, %v; want an error", status, err)
	}
}

func TestProbeTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	status, err := newClient(t, rm, Config{Timeout: 50 * time.Millisecond}).Probe(t.Context())
	if status != 0 || !errors.Is(err, ErrTimeout) {
		t.Fatalf("Probe = %d, %v; want ErrTimeout", status, err)
	}
}
