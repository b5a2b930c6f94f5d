package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/service"
	"github.com/syncd/syncd/transport"
)

// dataFileName is the queue's bbolt file in the data directory.
const dataFileName = "syncd.db"

// parseRunFlags resolves `syncd run`'s settings: defaults, the config
// file, SYNCD_* variables and the flags (package config).
func parseRunFlags(args []string, stderr io.Writer) (config.Loaded, error) {
	l, err := config.Load(args, os.Getenv, stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return l, fmt.Errorf("%w: run: %v", errUsage, err)
	}
	return l, err
}

// cmdRun runs the daemon in the foreground until ctx ends (SIGINT or
// SIGTERM), then stops the API server and closes the queue.
//
// Under a service manager (systemd, launchd, Windows) the daemon runs
// through service.Run, which answers the manager's start and stop.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	l, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	rc := l.Settings
	if l.PrintConfig {
		return config.WriteJSON(stdout, rc)
	}
	if err := config.MkdirPrivate(rc.DataDir); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	logOut, closeLog, err := service.LogOutput(rc.DataDir, stderr)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer closeLog()
	logger := config.NewLogger(logOut, rc)
	if l.File != "" {
		logger.Info("config file", "path", l.File)
	}
	return service.Run(ctx, service.RunConfig{
		Name:        rc.ServiceName,
		StopTimeout: localapi.DefaultShutdownTimeout + rc.ShutdownTimeout + 2*time.Second,
		Logger:      logger,
	}, func(ctx context.Context) error {
		return runDaemon(ctx, rc, stdout, logger, nil)
	})
}

// runDaemon is the daemon: it runs until ctx ends. listening, if not
// nil, is called with the local API's address once it listens.
func runDaemon(ctx context.Context, rc config.Settings, stdout io.Writer, logger *slog.Logger, listening func(addr string)) error {
	// Every committed change goes to the event bus (GET /v1/events) and
	// marks the queue totals as possibly changed.
	bus := daemon.NewBus(daemon.BusConfig{})
	totals := daemon.NewTotals(daemon.TotalsConfig{Logger: logger})
	// The status page's chart: the queue's depth and the sends, sampled
	// in memory.
	history, err := daemon.NewHistory(daemon.HistoryConfig{Logger: logger})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	dbPath := filepath.Join(rc.DataDir, dataFileName)
	// bbolt never shrinks its file: give back a large free share at start.
	if ok, before, after, err := queue.CompactIfWorthIt(dbPath); errors.Is(err, queue.ErrLocked) {
		return fmt.Errorf("another syncd is already running on %s", rc.DataDir)
	} else if err != nil {
		logger.Warn("run: compacting the data file failed; going on with it as it is", "err", err)
	} else if ok {
		logger.Info("run: compacted the data file", "before_bytes", before, "after_bytes", after)
	}
	store, err := queue.Open(dbPath, queue.Config{
		Logger:         logger,
		LockTimeout:    rc.LockTimeout,
		MaxDataBytes:   rc.MaxDataBytes,
		MaxQueueBytes:  rc.MaxQueueBytes,
		DoneRetention:  rc.DoneRetention,
		MergeableTypes: rc.MergeableTypes,
		OnCommit: func(events []queue.Event) {
			bus.Publish(events)
			totals.Observe(events)
			history.Observe(events)
		},
	})
	if errors.Is(err, queue.ErrLocked) {
		return fmt.Errorf("another syncd is already running on %s", rc.DataDir)
	}
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer store.Close()
	defer bus.Close()
	if err := bus.SetSource(store); err != nil {
		return fmt.Errorf("run: event bus: %w", err)
	}
	if err := totals.SetStore(store); err != nil {
		return fmt.Errorf("run: queue totals: %w", err)
	}
	totals.Start(context.WithoutCancel(ctx))
	defer totals.Stop()
	history.SetStore(store)
	history.Start(context.WithoutCancel(ctx))
	defer history.Stop()
	remoteURL := rc.Remote
	if remoteURL == "" {
		url, path, stopRemote, err := startEmbeddedRemote(ctx, rc.DataDir, rc.MaxDataBytes, logger)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer stopRemote()
		remoteURL = url
		fmt.Fprintf(stdout, "syncd: no --remote given: syncing to the embedded reference server at %s (data in %s; dev tokens: any token works, its account is the part before the first '.')\n", url, path)
	}
	client, err := transport.New(transport.Config{
		BaseURL: remoteURL, Timeout: rc.RequestTimeout,
		// A create's reply carries its data back, maybe escaped to six
		// times its size (see transport.DefaultMaxResponseBytes).
		MaxResponseBytes: max(transport.DefaultMaxResponseBytes, 6*int64(rc.MaxDataBytes)+64<<10),
	})
	if err != nil {
		return fmt.Errorf("run: --remote %s: %w", config.Redact(rc.Remote), err)
	}
	d, err := daemon.New(daemon.Config{
		Store: store, Logger: logger, Transport: client, Concurrency: rc.Concurrency, MaxOperationAge: rc.MaxOperationAge,
		// The lease outlives the request timeout as the default does
		// transport's (a send is cut off at two thirds of it).
		Lease: 3 * rc.RequestTimeout,
		Pull:  daemon.PullMode(rc.Pull),
		Batch: daemon.BatchMode(rc.Batch),
	})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := registerBuildMetrics(d.Registry()); err != nil {
		logger.Warn("run: build and runtime metrics not served", "err", err)
	}
	// queue.totals carries the signed-in account's share too.
	totals.SetAccount(d.Account)
	// Not ctx itself: a signal must not cut sends short; stopDaemon
	// gives them daemonStopTimeout.
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	stopDaemon := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rc.ShutdownTimeout)
		defer cancel()
		d.Stop(sctx)
	}
	defer stopDaemon()
	fmt.Fprintf(stdout, "syncd: syncing to %s\n", remoteURL)

	token, tokenPath, err := localapi.LoadOrCreateToken(rc.DataDir)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	cfg := localapi.Config{
		Daemon:         d,
		Token:          token,
		AllowedOrigins: rc.AllowedOrigins,
		EntityTypes:    rc.EntityTypes,
		MaxBodyBytes:   rc.MaxBodyBytes,
		AllowedHosts:   rc.AllowedHosts,
		Logger:         logger,
		Bus:            bus,
		UIOff:          rc.UI == config.UIOff,
		History:        history,
	}
	if rc.ForceListen {
		// Requests to a forced address carry its host name in Host.
		if host, _, err := net.SplitHostPort(rc.Listen); err == nil && host != "" {
			cfg.AllowedHosts = append(slices.Clone(cfg.AllowedHosts), host)
		}
	}
	srv, err := localapi.New(cfg)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	ln, err := net.Listen("tcp", rc.Listen)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	lns := []net.Listener{ln}
	fmt.Fprintf(stdout, "syncd: listening on http://%s\n", ln.Addr())
	if rc.Socket != config.SocketOff {
		// The same API, token and all, for this user's processes only.
		uln, err := localapi.ListenUnix(rc.Socket, logger)
		switch {
		case err != nil && rc.SocketIsDefault():
			// A data directory made by hand with mode 0755, or one too
			// deep for a socket's path: the apps keep the TCP listener,
			// and the log says how to get the socket.
			logger.Warn("run: no Unix socket; the local API is served on listen only", "socket", rc.Socket, "err", err)
		case err != nil:
			ln.Close()
			return fmt.Errorf("run: %w (or set socket to %s to serve on listen only)", err, config.SocketOff)
		default:
			lns = append(lns, uln)
			fmt.Fprintf(stdout, "syncd: listening on unix:%s\n", rc.Socket)
		}
	}
	// A note for this user's client commands, which find this daemon by
	// it whatever --data-dir it was given.
	if abs, err := filepath.Abs(rc.DataDir); err == nil {
		note := runningNote{PID: os.Getpid(), DataDir: abs, Addr: dialAddr(ln.Addr().String()), StartedAt: time.Now().UTC(), Version: buildVersion().Version, Remote: config.Redact(remoteURL)}
		if len(lns) > 1 {
			note.Socket = rc.Socket
		}
		removeNote, err := writeRunningNote(note, os.Getenv)
		if err != nil {
			logger.Info("run: no note for the client commands; they find this syncd with --data-dir only", "err", err)
		}
		defer removeNote()
	}
	// The last line of the start: the note is written before it, so a
	// client command run once it is printed finds this syncd.
	fmt.Fprintf(stdout, "syncd: API token in %s\n", tokenPath)
	if listening != nil {
		listening(ln.Addr().String())
	}
	if err := srv.Run(ctx, lns...); err != nil {
		return err
	}
	bus.Close() // the API has stopped: no subscriber is left
	stopDaemon()
	totals.Stop()
	history.Stop()
	if err := store.Close(); err != nil {
		return fmt.Errorf("run: close queue: %w", err)
	}
	fmt.Fprintln(stdout, "syncd: stopped")
	return nil
}

// startDaemon runs runDaemon for rc in the background, as `syncd run`
// would, until stop. It returns the local API's address and token.
func startDaemon(ctx context.Context, rc config.Settings, logger *slog.Logger) (addr, token string, stop func(), err error) {
	if err := config.MkdirPrivate(rc.DataDir); err != nil {
		return "", "", nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	addrs := make(chan string, 1)
	stopped := make(chan error, 1)
	go func() { stopped <- runDaemon(ctx, rc, io.Discard, logger, func(a string) { addrs <- a }) }()
	stop = func() {
		cancel()
		<-stopped
	}
	select {
	case addr = <-addrs:
	case err := <-stopped:
		cancel()
		return "", "", nil, fmt.Errorf("daemon: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(rc.DataDir, localapi.TokenFileName))
	if err != nil {
		stop()
		return "", "", nil, err
	}
	return addr, strings.TrimSpace(string(b)), stop, nil
}
