// Package localapitest starts a real syncd local API for tests of the API,
// its Go client and the command line: a bbolt queue in a temporary
// directory, the event bus fed by its commits, a daemon (draining to the
// reference remote server on loopback when asked), and the server
// running on a loopback listener (and a Unix socket when asked) with Run,
// as `syncd run` does.
package localapitest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

// Token is the API token of every Env.
const Token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Options configure an Env; the zero value is a signed-out API whose
// daemon does not send.
type Options struct {
	// Config is the server's; Daemon, Token and Bus are filled in, and
	// Logger when nil.
	Config localapi.Config
	// Queue is the store's; OnCommit is filled in. NoSync unless Durable.
	Queue   queue.Config
	Durable bool
	// Bus configures the event bus.
	Bus daemon.BusConfig
	// Account, when set, is signed in (its remote token is Account+".test").
	Account string
	// Drain starts the daemon's workers, sending to an in-process
	// reference remote server with dev tokens.
	Drain bool
	// Transport is the config of the daemon's transport when Drain is
	// set; BaseURL is filled in.
	Transport transport.Config
	// Daemon is the daemon's config; Store, Transport and Logger are
	// filled in. Pull is off unless set.
	Daemon daemon.Config
	// StoredSession, when set, is written into the data file before the
	// daemon starts, as a data file from an earlier run holds it: it is
	// not checked as PUT /v1/session would check it.
	StoredSession *queue.Session
	// UnixSocket serves the API on a Unix socket too (localapi.ListenUnix;
	// Linux and macOS), at Env.Socket.
	UnixSocket bool
}

// Env is a running API.
type Env struct {
	Store  *queue.Store
	Daemon *daemon.Daemon
	Bus    *daemon.Bus
	// History is the status history the server serves (GET
	// /v1/status/history) unless Options.Config.History is set: fed by
	// the store's commits, sampled only when a test calls its Sample
	// (its loop is not started).
	History *daemon.History
	Server  *localapi.Server
	// Addr is the API's host:port on 127.0.0.1; URL is http://Addr.
	Addr string
	URL  string
	// Socket is the path of the API's Unix socket (Options.UnixSocket
	// only), in a directory of its own that Stop leaves behind and
	// t.Cleanup removes.
	Socket string
	// Remote is the reference server the daemon drains to (Drain only).
	Remote *remote.Server

	stopOnce sync.Once
	stopErr  error
	cancel   context.CancelFunc
	ran      chan error
}

// Start starts an Env; t.Cleanup stops it, checks the queue's invariants
// and closes everything it opened.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	e := &Env{Bus: daemon.NewBus(o.Bus)}
	h, err := daemon.NewHistory(daemon.HistoryConfig{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	e.History = h
	qcfg := o.Queue
	qcfg.NoSync = !o.Durable
	qcfg.OnCommit = func(events []queue.Event) {
		e.Bus.Publish(events)
		h.Observe(events)
	}
	if qcfg.Logger == nil {
		qcfg.Logger = logger
	}
	store, err := queue.Open(filepath.Join(t.TempDir(), "syncd.db"), qcfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Store = store
	h.SetStore(store)
	t.Cleanup(func() {
		if err := store.Check(); err != nil {
			t.Errorf("queue invariants after test: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := e.Bus.SetSource(store); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Bus.Close)

	if o.StoredSession != nil {
		if err := store.SaveSession(context.Background(), o.StoredSession, queue.Event{}); err != nil {
			t.Fatal(err)
		}
	}
	dcfg := o.Daemon
	dcfg.Store = store
	if dcfg.Pull == "" {
		// API tests watch the events and requests of what they do; a
		// puller's would be among them. Pull tests set Daemon.Pull.
		dcfg.Pull = daemon.PullOff
	}
	if dcfg.Logger == nil {
		dcfg.Logger = logger
	}
	if o.Drain {
		rs, err := remote.New(remote.Config{DataDir: t.TempDir(), DevTokens: true})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(rs.Handler())
		t.Cleanup(func() {
			hs.Close()
			rs.Close()
		})
		e.Remote = rs
		tcfg := o.Transport
		tcfg.BaseURL = hs.URL
		tc, err := transport.New(tcfg)
		if err != nil {
			t.Fatal(err)
		}
		dcfg.Transport = tc
	}
	d, err := daemon.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Daemon = d
	if o.Drain {
		if err := d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Stop(context.Background()) })
	}
	if o.Account != "" {
		if err := d.SetSession(context.Background(), o.Account, o.Account+".test"); err != nil {
			t.Fatal(err)
		}
	}

	cfg := o.Config
	cfg.Daemon, cfg.Token, cfg.Bus = d, Token, e.Bus
	if cfg.History == nil {
		cfg.History = e.History
	}
	if cfg.Logger == nil {
		cfg.Logger = logger
	}
	srv, err := localapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Server = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.Addr = ln.Addr().String()
	e.URL = "http://" + e.Addr
	lns := []net.Listener{ln}
	if o.UnixSocket {
		// Not t.TempDir: its path, with the test's name in it, may pass
		// the 103 bytes a socket path may have on macOS.
		dir, err := os.MkdirTemp("", "syncd")
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		e.Socket = filepath.Join(dir, localapi.SocketFileName)
		uln, err := localapi.ListenUnix(e.Socket, logger)
		if err != nil {
			ln.Close()
			t.Fatal(err)
		}
		lns = append(lns, uln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.ran = cancel, make(chan error, 1)
	go func() { e.ran <- srv.Run(ctx, lns...) }()
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("localapi Run: %v", err)
		}
	})
	return e
}

// Stop stops the server as a signal to `syncd run` would (Run's context
// ends) and returns Run's error. Safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		e.cancel()
		e.stopErr = <-e.ran
		if errors.Is(e.stopErr, context.Canceled) {
			e.stopErr = nil
		}
	})
	return e.stopErr
}
