package localapi

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
)

// panicStore is the real store, except that writing the entity "boom"
// panics, as a bug deep in a write would.
type panicStore struct{ *queue.Store }

func (p panicStore) Apply(ctx context.Context, w queue.Write) (queue.Result, error) {
	if w.EntityID == "boom" {
		panic("a bug while writing " + w.EntityID)
	}
	return p.Store.Apply(ctx, w)
}

// A panic in a handler is answered 500 internal and logged with its
// stack, and holds nothing: the daemon's write lock was taken for it
// (AccountWrite), yet a logout, which waits for every write, still goes
// through, and so do later writes on the same connection pool.
func TestHandlerPanicIsRecovered(t *testing.T) {
	t.Parallel()
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), queue.Config{NoSync: true, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d, err := daemon.New(daemon.Config{Store: store, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	srv, err := New(Config{Daemon: d, Store: panicStore{store}, Token: testToken, Logger: newTestLogger(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	e := &env{t: t, store: store, d: d, srv: srv, url: hs.URL, client: hs.Client()}
	defer hs.Client().CloseIdleConnections()

	e.must(200, req{method: "PUT", path: "/v1/session", body: `{"accountId":"alice","accessToken":"alice.dev"}`})
	r := e.must(500, req{method: "POST", path: "/v1/entities/note", body: `{"id":"boom","data":{}}`})
	if r.code() != CodeInternal || strings.Contains(r.raw, "bug") {
		t.Errorf("panic answered %s", r.raw)
	}
	if log := logged.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "a bug while writing boom") || !strings.Contains(log, "panic_test.go") {
		t.Errorf("panic not logged with its stack: %q", log)
	}
	e.must(201, req{method: "POST", path: "/v1/entities/note", body: `{"id":"n1","data":{}}`})
	e.must(200, req{method: "DELETE", path: "/v1/session"})
	if _, err := store.GetEntity("alice", "note", "boom"); err == nil {
		t.Error("the panicking write was kept")
	}
}
