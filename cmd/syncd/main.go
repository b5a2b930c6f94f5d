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
	"slices"
	"strings"
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
		{"doctor", "check this syncd and say what needs attention and how to fix it", cmdDoctor},
		{"ops", "list, show, retry or discard queued operations", cmdOps},
		{"apps", "add, list or remove app tokens, each scoped to entity types", cmdApps},
		{"events", "print the live sync event stream", cmdEvents},
		{"ui", "open the status page in the browser, signed in by a one-time link", cmdUI},
		{"compact", "rewrite the data file without its free pages (syncd stopped)", cmdCompact},
		{"bench", "measure durable creates and syncing on this machine, in a scratch directory", cmdBench},
		{"service", "install, start, stop or uninstall syncd as an OS service", cmdService},
		{"version", "print syncd's version, commit and Go version", cmdVersion},
		{"completion", "print a shell completion script (bash, zsh or fish)", cmdCompletion},
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
		printError(os.Stderr, err)
		os.Exit(2)
	default:
		printError(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// printError writes err as one "syncd: ..." line (and, for a usage
// error, where to read the usage).
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "syncd: "+plainMessage(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "run 'syncd help %s' for usage\n", ue.command)
	} else if errors.Is(err, errUsage) {
		fmt.Fprintln(w, "run 'syncd help' for the commands")
	}
}

// packagePrefixes are the names of syncd's packages, which their
// errors start with ("queue: operation not found"): useful in a log,
// noise to a person at the command line.
var packagePrefixes = []string{"usage", "syncd", "config", "queue", "daemon", "service", "localapi", "transport", "remote", "idempotency", "changefeed"}

// plainMessage is msg without the package names its wrapped errors put
// in front of each part ("run: config: invalid setting: x" → "run:
// invalid setting: x"), and without one part said twice in a row.
func plainMessage(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:0]
	for i, p := range parts {
		if i < len(parts)-1 && slices.Contains(packagePrefixes, p) {
			continue
		}
		if len(out) > 0 && out[len(out)-1] == p {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}

// usageError is a usage error of one command.
type usageError struct {
	command string
	err     error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

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
	if errors.Is(err, errUsage) {
		return exitUsage
	}
	return 1
}

// run dispatches to a subcommand; SIGINT and SIGTERM cancel its context.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return fmt.Errorf("%w: no command given", errUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return nil
	case "-version", "--version":
		args = []string{"version"}
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return nil
		}
		// `syncd help X [Y]` is `syncd X [Y] --help`, on stdout.
		if findCommand(args[1]) == nil {
			return fmt.Errorf("%w: help: unknown command %q", errUsage, args[1])
		}
		err := run(append(slices.Clone(args[1:]), "--help"), stdout, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	c := findCommand(args[0])
	if c == nil {
		return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.run(ctx, args[1:], stdout, stderr)
	if errors.Is(err, errUsage) {
		var ue *usageError
		if !errors.As(err, &ue) {
			err = &usageError{command: c.name, err: err}
		}
	}
	return err
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return &c
		}
	}
	return nil
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// parseQuiet parses args into fs without the flag package's own
// printing: -h prints the command's usage and returns flag.ErrHelp; a
// bad flag returns its error alone, not the whole usage around it.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
	}
	return err
}

// parseFlags parses a command's flags, which take no positional
// arguments: bad flags and stray arguments are usage errors (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, command string) error {
	if err := parseQuiet(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %s: %v", errUsage, command, err)
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
	fmt.Fprintln(w)
	fmt.Fprintln(w, "'syncd help <command>' (or 'syncd <command> --help') prints a command's usage and flags.")
}
