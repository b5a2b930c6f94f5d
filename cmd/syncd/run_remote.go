package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/syncd/syncd/remote"
)

// embeddedRemoteDir is the directory, inside the data directory, of the
// embedded reference server's bbolt file.
const embeddedRemoteDir = "remote"

// startEmbeddedRemote serves the reference server in-process on a
// loopback port with dev tokens and its bbolt file in dataDir/remote:
// what `syncd run` syncs to when no --remote is given, so a first run
// shows a full round trip. stop shuts it down and closes its file.
//
// maxDataBytes is the daemon's entity data limit: the server accepts that
// much data plus the request's envelope, so nothing the local API accepts
// is refused on the way out.
func startEmbeddedRemote(ctx context.Context, dataDir string, maxDataBytes int, logger *slog.Logger) (url, path string, stop func(), err error) {
	dir := filepath.Join(dataDir, embeddedRemoteDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", nil, fmt.Errorf("embedded remote: %w", err)
	}
	srv, err := remote.New(remote.Config{DataDir: dir, DevTokens: true, LoopbackHostsOnly: true, Logger: logger, MaxBodyBytes: int64(maxDataBytes) + 64<<10})
	if err != nil {
		return "", "", nil, fmt.Errorf("embedded remote: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", "", nil, fmt.Errorf("embedded remote: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Run(rctx, ln); err != nil {
			logger.Error("embedded remote stopped", "err", err)
		}
	}()
	stop = func() {
		cancel()
		<-done
		srv.Close()
	}
	return "http://" + ln.Addr().String(), filepath.Join(dir, remote.DefaultFileName), stop, nil
}
