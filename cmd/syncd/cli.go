package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
)

// Exit codes of the client commands (status, ops, events), for scripts.
const (
	exitOK          = 0
	exitFailure     = 1 // the API answered with an error
	exitUsage       = 2
	exitUnreachable = 3 // no syncd answered at the address
	exitNotFound    = 4 // the operation (or entity) does not exist
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	addr       string
	socket     string // after resolve: the socket to dial, "" for addr
	dataDir    string
	tokenFile  string
	configFile string
	// found is the running syncd discover chose, if it did.
	found *runningNote
}

func (cf *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.addr, "addr", "", "address of syncd's local API (env SYNCD_ADDR; default: listen from the config file, else "+localapi.DefaultListenAddr+"); given, it is dialled instead of the socket")
	fs.StringVar(&cf.socket, "socket", "", "syncd's Unix socket, dialled instead of the address (default: socket from the config file, when that socket exists; "+config.SocketOff+": dial the address)")
	fs.StringVar(&cf.dataDir, "data-dir", "", "syncd's data directory, where the API token is (env SYNCD_DATA_DIR; default: dataDir from the config file, else the per-OS default)")
	fs.StringVar(&cf.tokenFile, "token-file", "", "file holding the API token (default DATA_DIR/"+localapi.TokenFileName+")")
	fs.StringVar(&cf.configFile, "config", "", "syncd's config file, read for listen and dataDir (env "+config.EnvConfig+"; default: the per-OS config file if it exists)")
}

// resolve fills what the flags left empty the way `syncd run` finds its
// settings: the config file and the SYNCD_* variables over the defaults,
// so a client finds the daemon that the same config runs. SYNCD_ADDR
// (the address to dial) wins over the config's listen address.
//
// The client dials the Unix socket named by --socket; else, unless an
// address was given (--addr or SYNCD_ADDR), the config's socket when it
// exists; else the address.
func (cf *clientFlags) resolve(getenv func(string) string) error {
	socketGiven := cf.socket != ""
	if cf.socket == config.SocketOff {
		cf.socket = ""
	}
	if cf.addr == "" {
		cf.addr = getenv("SYNCD_ADDR")
	}
	addrGiven := cf.addr != ""
	if addrGiven && (cf.dataDir != "" || cf.tokenFile != "") && cf.configFile == "" {
		return nil // nothing left to look up
	}
	// Nothing says where the daemon is: the one this user runs is the
	// one meant, whatever --data-dir it was started with.
	if cf.dataDir == "" && cf.tokenFile == "" && getenv("SYNCD_DATA_DIR") == "" && cf.configFile == "" && getenv(config.EnvConfig) == "" {
		if found, err := cf.discover(getenv, addrGiven, socketGiven); err != nil || found {
			return err
		}
	}
	l, err := config.ResolveFile(cf.configFile, config.DefaultScope(), func(name string) string {
		if name == "SYNCD_DATA_DIR" {
			switch {
			case cf.dataDir != "":
				return cf.dataDir // the flag wins, and needs no default
			case cf.tokenFile != "" && getenv(name) == "":
				return "." // unused: the token file is named
			}
		}
		return getenv(name)
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if cf.addr == "" {
		cf.addr = dialAddr(l.Settings.Listen)
	}
	if cf.dataDir == "" {
		cf.dataDir = l.Settings.DataDir
	}
	if !socketGiven && !addrGiven && isSocket(l.Settings.Socket) {
		cf.socket = l.Settings.Socket
	}
	if !socketGiven && !addrGiven {
		cf.addressOf(getenv)
	}
	return nil
}

// addressOf takes the address and socket of the syncd running on the
// data directory named, from its note: it may listen elsewhere than
// the config says (--listen 127.0.0.1:0).
func (cf *clientFlags) addressOf(getenv func(string) string) {
	dir, err := filepath.Abs(cf.dataDir)
	if err != nil {
		return
	}
	runDir, err := config.RunningDir(getenv)
	if err != nil {
		return
	}
	n, err := readNote(filepath.Join(runDir, noteFile(dir)))
	if err != nil || filepath.Clean(n.DataDir) != dir || !answers(context.Background(), n) {
		return
	}
	cf.addr = n.Addr
	cf.socket = ""
	if isSocket(n.Socket) {
		cf.socket = n.Socket
	}
}

// discover looks for the syncd this user runs (config.RunningDir), the
// one at the address or socket given if one was. One found: the flags
// are set to it. Several: an error lists them.
func (cf *clientFlags) discover(getenv func(string) string, addrGiven, socketGiven bool) (bool, error) {
	notes, err := runningDaemons(context.Background(), getenv)
	if err != nil {
		return false, nil // no notes: the defaults it is
	}
	notes = slices.DeleteFunc(notes, func(n runningNote) bool {
		return addrGiven && !sameAddr(n.Addr, cf.addr) || socketGiven && cf.socket != "" && n.Socket != cf.socket
	})
	switch len(notes) {
	case 0:
		return false, nil
	case 1:
	default:
		return false, &exitError{code: exitUsage, err: errSeveralDaemons(notes)}
	}
	n := notes[0]
	cf.dataDir = n.DataDir
	cf.found = &n
	if !addrGiven {
		cf.addr = n.Addr
	}
	if !socketGiven && !addrGiven && isSocket(n.Socket) {
		cf.socket = n.Socket
	}
	return true, nil
}

// sameAddr reports whether a and b reach the same local API: the same
// port on loopback hosts, or the same address.
func sameAddr(a, b string) bool {
	if a == b {
		return true
	}
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && pa == pb && isLoopback(ha) && isLoopback(hb)
}

func isLoopback(host string) bool {
	if host == "localhost" || host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// isSocket reports whether path names a socket this process can see.
func isSocket(path string) bool {
	if path == config.SocketOff {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().Type() == fs.ModeSocket
}

// dialAddr is the address a client on this machine dials to reach a
// daemon listening on listen: a wildcard host (a forced 0.0.0.0 or [::])
// is reached on loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	ip := net.ParseIP(host)
	switch {
	case host == "", ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// client builds an API client from the flags.
func (cf *clientFlags) client() (*client.Client, error) {
	path := cf.tokenFile
	if path == "" {
		path = filepath.Join(cf.dataDir, localapi.TokenFileName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("cannot read the API token: %w (no syncd of yours answers: start one with `syncd run`, or name the --data-dir of one started as another user)", err)}
	}
	return client.New(client.Config{Addr: cf.addr, Socket: cf.socket, Token: string(trimSpace(b))})
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// parseClientFlags parses a client command's flags, which may come
// before or after its arguments (`syncd ops show ID --json`), and
// returns the arguments.
func parseClientFlags(name string, args []string, stderr io.Writer, usage string, extra func(*flag.FlagSet)) (*clientFlags, []string, error) {
	cf := &clientFlags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf.register(fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		fs.PrintDefaults()
	}
	var pos []string
	for rest := args; ; {
		if err := parseQuiet(fs, rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%w: %s: %v", errUsage, name, err)
		}
		if fs.NArg() == 0 {
			break
		}
		if i := len(rest) - fs.NArg() - 1; i >= 0 && rest[i] == "--" {
			pos = append(pos, fs.Args()...) // everything after -- is an argument
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if err := cf.resolve(os.Getenv); err != nil {
		return nil, nil, err
	}
	if n := cf.found; n != nil {
		// Say which, unless it is the one the defaults name anyway.
		if p, err := config.DefaultPaths(config.DefaultScope(), os.Getenv); err != nil || filepath.Clean(p.DataDir) != filepath.Clean(n.DataDir) {
			fmt.Fprintf(stderr, "syncd: talking to the syncd running on %s (%s)\n", n.DataDir, n.Addr)
		}
	}
	return cf, pos, nil
}

// apiErr maps a client error onto an exit code.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	var e *client.Error
	if errors.As(err, &e) {
		if e.Code == "not_found" {
			return &exitError{code: exitNotFound, err: err}
		}
		return &exitError{code: exitFailure, err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) {
		return &exitError{code: exitUnreachable, err: fmt.Errorf("syncd is not reachable: %w", err)}
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
