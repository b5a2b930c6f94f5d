// Command syncd is the local-first sync daemon and its tools: run the
// daemon, run the reference remote server, inspect and fix the queue, and
// install syncd as an OS service. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. run gets the arguments after the
// subcommand's name; stdout and stderr are passed in so tests can run
// commands in-process.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the daemon in the foreground", cmdRun},
		{"server", "run the reference remote server", cmdServer},
		{"status", "show sync status: account, online, queue counts, failed operations", cmdStatus},
		{"ops", "list, show, retry or discard queued operations", cmdOps},
		{"apps", "add, list or remove app tokens, each scoped to entity types", cmdApps},
		{"events", "print the live sync event stream", cmdEvents},
		{"compact", "rewrite the data file without its free pages (syncd stopped)", cmdCompact},
		{"bench", "measure durable creates and syncing on this machine, in a scratch directory", cmdBench},
		{"service", "install, start, stop or uninstall syncd as an OS service", cmdService},
	}
}

// errUsage marks an error caused by bad command-line usage (exit code 2).
var errUsage = errors.New("usage")

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "syncd:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "syncd:", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific exit code for scripts.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// run dispatches to a subcommand; SIGINT and SIGTERM cancel its context.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return fmt.Errorf("%w: no command given", errUsage)
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}

// parseFlags parses a command's flags, which take no positional
// arguments: bad flags and stray arguments are usage errors (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, command string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s: unexpected argument %q", errUsage, command, fs.Arg(0))
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: syncd <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}
