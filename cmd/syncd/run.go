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
	"strings"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// daemonStopTimeout is how long sends in flight may finish at shutdown
// before they are canceled (their operations go back to pending).
const daemonStopTimeout = 10 * time.Second

// dataFileName is the queue's bbolt file in the data directory.
const dataFileName = "syncd.db"

// runConfig is what `syncd run` was asked to do.
type runConfig struct {
	DataDir        string
	Listen         string
	ForceListen    bool
	AllowedOrigins []string
	EntityTypes    []string
	// Remote is the remote server's base URL; empty means the embedded
	// reference server.
	Remote string
}

// parseRunFlags parses `syncd run`'s flags. It is the one place that
// knows them, so per-OS defaults and a config file can replace it.
func parseRunFlags(args []string, stderr io.Writer) (runConfig, error) {
	var rc runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&rc.DataDir, "data-dir", defaultDataDir(), "data directory: the queue file "+dataFileName+" and the API token "+localapi.TokenFileName)
	fs.StringVar(&rc.Listen, "listen", localapi.DefaultListenAddr, "address of the local API (loopback unless --force-listen)")
	fs.BoolVar(&rc.ForceListen, "force-listen", false, "allow a non-loopback --listen address")
	fs.StringVar(&rc.Remote, "remote", "", "base URL of the remote server to sync to (default: the reference server, started in-process on loopback with dev tokens)")
	fs.Func("allowed-origin", "a browser origin allowed to call the API, e.g. http://localhost:3000 (repeatable)", func(s string) error {
		if s == "" || strings.HasSuffix(s, "/") || !strings.Contains(s, "://") {
			return fmt.Errorf("want an origin like http://localhost:3000, got %q", s)
		}
		rc.AllowedOrigins = append(rc.AllowedOrigins, s)
		return nil
	})
	fs.Func("entity-types", "comma-separated entity types apps may use (default: any)", func(s string) error {
		for t := range strings.SplitSeq(s, ",") {
			if t = strings.TrimSpace(t); t != "" {
				if err := queue.ValidateEntityType(t); err != nil {
					return err
				}
				rc.EntityTypes = append(rc.EntityTypes, t)
			}
		}
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd run [--data-dir DIR] [--listen ADDR] [--force-listen] [--allowed-origin ORIGIN]... [--entity-types a,b] [--remote URL]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return rc, err
		}
		return rc, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return rc, fmt.Errorf("%w: run: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if rc.DataDir == "" {
		return rc, fmt.Errorf("%w: run: --data-dir is required (no home directory to default to)", errUsage)
	}
	if err := localapi.CheckListenAddr(rc.Listen, rc.ForceListen); err != nil {
		return rc, fmt.Errorf("%w: run: --listen: %v (add --force-listen to serve on it anyway)", errUsage, err)
	}
	return rc, nil
}

// defaultDataDir is $XDG_DATA_HOME/syncd, else ~/.local/share/syncd.
func defaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "syncd")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "syncd")
	}
	return ""
}

// cmdRun runs the daemon in the foreground until ctx ends (SIGINT or
// SIGTERM), then stops the API server and closes the queue.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rc, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	if err := os.MkdirAll(rc.DataDir, 0o700); err != nil {
		return fmt.Errorf("run: data directory: %w", err)
	}
	store, err := queue.Open(filepath.Join(rc.DataDir, dataFileName), queue.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	defer store.Close()
	remoteURL := rc.Remote
	if remoteURL == "" {
		url, path, stopRemote, err := startEmbeddedRemote(ctx, rc.DataDir, logger)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		defer stopRemote()
		remoteURL = url
		fmt.Fprintf(stdout, "syncd: no --remote given: syncing to the embedded reference server at %s (data in %s; dev tokens: any token works, its account is the part before the first '.')\n", url, path)
	}
	client, err := transport.New(transport.Config{BaseURL: remoteURL})
	if err != nil {
		return fmt.Errorf("run: --remote: %w", err)
	}
	d, err := daemon.New(daemon.Config{Store: store, Logger: logger, Transport: client})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := d.Start(ctx); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	stopDaemon := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), daemonStopTimeout)
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
		Logger:         logger,
	}
	if rc.ForceListen {
		// Requests to a forced address carry its host name in Host.
		if host, _, err := net.SplitHostPort(rc.Listen); err == nil && host != "" {
			cfg.AllowedHosts = []string{host}
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
	fmt.Fprintf(stdout, "syncd: listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stdout, "syncd: API token in %s\n", tokenPath)
	if err := srv.Run(ctx, ln); err != nil {
		return err
	}
	stopDaemon()
	if err := store.Close(); err != nil {
		return fmt.Errorf("run: close queue: %w", err)
	}
	fmt.Fprintln(stdout, "syncd: stopped")
	return nil
}
