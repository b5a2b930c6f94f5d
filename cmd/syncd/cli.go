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
	return nil
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
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("cannot read the API token (is syncd running with this --data-dir?): %w", err)}
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
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
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
