package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"

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
	addr      string
	dataDir   string
	tokenFile string
}

func (cf *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&cf.addr, "addr", envOr("SYNCD_ADDR", localapi.DefaultListenAddr), "address of syncd's local API (env SYNCD_ADDR)")
	fs.StringVar(&cf.dataDir, "data-dir", envOr("SYNCD_DATA_DIR", defaultDataDir()), "syncd's data directory, where the API token is (env SYNCD_DATA_DIR)")
	fs.StringVar(&cf.tokenFile, "token-file", "", "file holding the API token (default DATA_DIR/"+localapi.TokenFileName+")")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
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
	return client.New(client.Config{Addr: cf.addr, Token: string(trimSpace(b))})
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
