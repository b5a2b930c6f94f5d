package idempotency_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/boltstore"
	bolt "go.etcd.io/bbolt"
)

func newStore(t *testing.T) *boltstore.Store {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "gate.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := boltstore.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := idempotency.New(idempotency.Config{}); !errors.Is(err, idempotency.ErrNoStore) {
		t.Errorf("no store: %v", err)
	}
	// Without Actor the gate serves Do; Wrap refuses it.
	g, err := idempotency.New(idempotency.Config{Store: newStore(t)})
	if err != nil {
		t.Fatalf("no actor: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r != idempotency.ErrNoActor {
				t.Errorf("Wrap without Actor: panic %v, want ErrNoActor", r)
			}
		}()
		g.Wrap(http.NotFoundHandler())
	}()
	if _, err := idempotency.NewSweeper(idempotency.SweeperConfig{}); !errors.Is(err, idempotency.ErrNoStore) {
		t.Errorf("sweeper without store: %v", err)
	}
}

// TestGateEdges covers the answers around the handler: safe methods,
// actor failures, body limits, outcomes and the operation name.
func TestGateEdges(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		outcomes []string
	)
	gate, err := idempotency.New(idempotency.Config{
		Store: newStore(t),
		Actor: func(r *http.Request) (string, error) {
			if a := r.Header.Get("X-User"); a != "" {
				return a, nil
			}
			return "", errors.New("anonymous")
		},
		MaxBodyBytes: 16,
		OnOutcome: func(r *http.Request, op string, o idempotency.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, op+" "+o.String())
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, inTx := boltstore.TxFromContext(r.Context())
		io.WriteString(w, r.Method+" tx="+map[bool]string{true: "yes", false: "no"}[inTx])
	})
	mux.Handle("/things/{id}", gate.Wrap(handler))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()

	tests := []struct {
		name, method, user, key, body string
		status                        int
		want                          string
	}{
		{"GET passes", "GET", "", "", "", 200, "GET tx=no"},
		{"HEAD passes", "HEAD", "", "", "", 200, ""},
		{"PUT gated", "PUT", "alice", "k1", `{}`, 200, "PUT tx=yes"},
		{"DELETE gated", "DELETE", "alice", "k2", "", 200, "DELETE tx=yes"},
		{"no actor", "POST", "", "k3", `{}`, 401, `"unauthorized"`},
		{"too large", "POST", "alice", "k4", `{"a":"0123456789abcdef"}`, 413, `"too_large"`},
		{"missing key", "PATCH", "alice", "", `{}`, 400, `"idempotency_key_missing"`},
		{"ambiguous JSON", "POST", "alice", "k6", `{"a":1,"a":2}`, 400, `"bad_request"`},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, srv.URL+"/things/1", strings.NewReader(tt.body))
		if tt.user != "" {
			req.Header.Set("X-User", tt.user)
		}
		if tt.key != "" {
			req.Header.Set(idempotency.HeaderKey, tt.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s, want %d containing %s", tt.name, resp.StatusCode, b, tt.status, tt.want)
		}
	}
	// A request built in-process may have a nil Body.
	req, _ := http.NewRequest(http.MethodPost, "/things/1", nil)
	req.Header.Set("X-User", "alice")
	req.Header.Set(idempotency.HeaderKey, "k5")
	req.Body = nil
	rr := httptest.NewRecorder()
	mux.ServeHTTP(rr, req)
	if rr.Code != 200 || rr.Body.String() != "POST tx=yes" {
		t.Errorf("nil body: %d %s", rr.Code, rr.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/things/{id} executed", "/things/{id} executed", "/things/{id} unauthorized",
		"/things/{id} too_large", "/things/{id} key_missing", "/things/{id} bad_request", "/things/{id} executed"}
	if strings.Join(outcomes, ",") != strings.Join(want, ",") {
		t.Fatalf("outcomes %q, want %q", outcomes, want)
	}
}
