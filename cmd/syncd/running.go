package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/syncd/syncd/config"
)

// runningNote is what a running syncd leaves in config.RunningDir: one
// file per data directory (only one syncd runs on a data directory),
// written once it listens and removed when it stops. The client
// commands of the same user read them to find a daemon started with a
// --data-dir they were not given.
type runningNote struct {
	PID     int    `json:"pid"`
	DataDir string `json:"dataDir"`
	// Addr is the local API's address as a client on this machine
	// dials it; Socket its Unix socket, if it serves one.
	Addr      string    `json:"addr"`
	Socket    string    `json:"socket,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	Version   string    `json:"version"`
	// Remote is the remote server's URL without credentials
	// (config.Redact), for `syncd doctor`'s look at it.
	Remote string `json:"remote,omitempty"`
}

// noteFile is the note's file name for a data directory.
func noteFile(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:8]) + ".json"
}

// writeRunningNote leaves n in config.RunningDir. remove takes it back,
// if it is still this one.
func writeRunningNote(n runningNote, getenv func(string) string) (remove func(), err error) {
	dir, err := config.RunningDir(getenv)
	if err != nil {
		return func() {}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return func() {}, err
	}
	b, err := json.Marshal(n)
	if err != nil {
		return func() {}, err
	}
	path := filepath.Join(dir, noteFile(n.DataDir))
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return func() {}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return func() {}, err
	}
	return func() {
		if cur, err := readNote(path); err == nil && cur.PID == n.PID && cur.StartedAt.Equal(n.StartedAt) {
			os.Remove(path)
		}
	}, nil
}

func readNote(path string) (runningNote, error) {
	var n runningNote
	b, err := os.ReadFile(path)
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return n, err
	}
	if n.DataDir == "" || n.Addr == "" {
		return n, errors.New("incomplete note")
	}
	return n, nil
}

// runningDaemons lists the syncds this user runs, as their notes say,
// sorted by data directory. A note whose daemon does not answer (it was
// killed) is removed.
func runningDaemons(ctx context.Context, getenv func(string) string) ([]runningNote, error) {
	dir, err := config.RunningDir(getenv)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var live []runningNote
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		n, err := readNote(path)
		if err != nil {
			continue // being written, or not ours
		}
		if !answers(ctx, n) {
			os.Remove(path)
			continue
		}
		live = append(live, n)
	}
	slices.SortFunc(live, func(a, b runningNote) int { return strings.Compare(a.DataDir, b.DataDir) })
	return live, nil
}

// answers reports whether something listens at the note's address (or
// socket) and its data directory still holds a token.
func answers(ctx context.Context, n runningNote) bool {
	if _, err := os.Stat(filepath.Join(n.DataDir, "api-token")); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", n.Addr)
	if err != nil && n.Socket != "" {
		c, err = d.DialContext(ctx, "unix", n.Socket)
	}
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// errSeveralDaemons: the client was not told which of several running
// syncds to talk to.
type errSeveralDaemons []runningNote

func (e errSeveralDaemons) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d syncds are running for this user; say which with --data-dir (or SYNCD_DATA_DIR):", len(e))
	for _, n := range e {
		fmt.Fprintf(&b, "\n  --data-dir %s\t(%s, pid %d, since %s)", n.DataDir, n.Addr, n.PID, n.StartedAt.Local().Format(time.DateTime))
	}
	return b.String()
}
