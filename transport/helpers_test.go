package transport

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// clock is the fake time of every test client.
var clock = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// seen is one request as the fake remote saw it.
type seen struct {
	Method     string
	RequestURI string
	Header     http.Header
	Body       []byte
}

// remote is a fake remote server on loopback that records every request
// it reads before answering with its handler.
type remote struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

// newRemote starts a remote answering with h; h sees the request after
// its body was read and recorded.
func newRemote(t *testing.T, h http.HandlerFunc) *remote {
	t.Helper()
	rm := &remote{}
	rm.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rm.mu.Lock()
		rm.reqs = append(rm.reqs, seen{r.Method, r.RequestURI, r.Header.Clone(), body})
		rm.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(rm.Close)
	return rm
}

func (rm *remote) requests() []seen {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return append([]seen(nil), rm.reqs...)
}

// newClient returns a Client for cfg with the fake clock and, when
// BaseURL is empty, the given remote's URL.
func newClient(t *testing.T, rm *remote, cfg Config) *Client {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = rm.URL
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return clock }
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// reply writes status, headers and body.
func reply(status int, body string, kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func createReq() Request {
	return Request{
		OperationID:    "op-1",
		Op:             OpCreate,
		EntityType:     "notes",
		EntityID:       "local-1",
		Data:           []byte(`{"title":"hi"}`),
		PayloadVersion: 3,
		Token:          "tok-a",
	}
}

func updateReq() Request {
	r := createReq()
	r.OperationID, r.Op, r.ServerID = "op-2", OpUpdate, "srv-1"
	return r
}

func deleteReq() Request {
	r := createReq()
	r.OperationID, r.Op, r.ServerID, r.Data = "op-3", OpDelete, "srv-1", nil
	return r
}
