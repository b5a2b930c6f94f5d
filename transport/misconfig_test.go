package transport

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A TLS handshake that cannot succeed (an untrusted certificate, an
// https URL for a plain-HTTP server) is its own code, with nothing sent:
// the daemon tells it from a network that is down.
func TestTLSFailures(t *testing.T) {
	t.Parallel()
	tlsServer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request reached the server: %s %s", r.Method, r.URL)
	}))
	tlsServer.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	tlsServer.StartTLS()
	defer tlsServer.Close()
	plain := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request reached the server: %s %s", r.Method, r.URL)
	})
	for name, base := range map[string]string{
		"untrusted certificate": tlsServer.URL,
		"https to plain HTTP":   "https://" + strings.TrimPrefix(plain.URL, "http://"),
	} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, plain, Config{BaseURL: base})
			o := c.Send(t.Context(), createReq())
			if o.Decision != Retry || o.Code != CodeTLS || o.Sends != 0 || o.Status != 0 {
				t.Fatalf("got %v %q sends %d status %d: %v", o.Decision, o.Code, o.Sends, o.Status, o.Err)
			}
			if o.Method != "POST" || !strings.HasPrefix(o.URL, base+"/v1/notes") {
				t.Errorf("method %q url %q", o.Method, o.URL)
			}
		})
	}
}

// A redirect is not followed; the outcome carries its Location.
func TestRedirectLocation(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://api.example.com"+r.URL.Path, http.StatusMovedPermanently)
	})
	c := newClient(t, rm, Config{})
	o := c.Send(t.Context(), createReq())
	if o.Decision != Permanent || o.Code != CodeUnexpectedStatus || o.Status != 301 || o.Location != "https://api.example.com/v1/notes" {
		t.Fatalf("got %v %q %d location %q", o.Decision, o.Code, o.Status, o.Location)
	}
	if o.URL != rm.URL+"/v1/notes" || o.Method != "POST" {
		t.Errorf("method %q url %q", o.Method, o.URL)
	}
}
