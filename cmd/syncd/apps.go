package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// cmdApps is `syncd apps add|list|remove`: the app tokens, through the
// local API with the admin token (the daemon holds the data file).
func cmdApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "apps add NAME --types TYPE[,TYPE...] [--read-only] | apps list [--json] | apps remove NAME"
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		return fmt.Errorf("%w: apps: no subcommand", errUsage)
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		fmt.Fprintln(stderr, "\n'syncd apps <subcommand> --help' lists a subcommand's flags.")
		return flag.ErrHelp
	}
	if !slices.Contains([]string{"add", "list", "remove"}, args[0]) {
		return fmt.Errorf("%w: apps: unknown subcommand %q (want add, list or remove)", errUsage, args[0])
	}
	sub, args := args[0], args[1:]
	var (
		types    typeList
		readOnly bool
		asJSON   bool
	)
	cf, pos, err := parseClientFlags("apps "+sub, args, stderr, usage, func(fs *flag.FlagSet) {
		switch sub {
		case "add":
			fs.Var(&types, "types", "the entity types the app may read and write, comma-separated or repeated (required)")
			fs.BoolVar(&readOnly, "read-only", false, "the app may read its types, not write them")
		case "list":
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		}
	})
	if err != nil {
		return err
	}
	switch sub {
	case "add", "remove":
		if len(pos) != 1 {
			return fmt.Errorf("%w: apps %s: want exactly one app name", errUsage, sub)
		}
	case "list":
		if len(pos) > 0 {
			return fmt.Errorf("%w: apps list: unexpected argument %q", errUsage, pos[0])
		}
	default:
		return fmt.Errorf("%w: apps: unknown subcommand %q (want add, list or remove)", errUsage, sub)
	}
	if sub == "add" && len(types) == 0 {
		return fmt.Errorf("%w: apps add: --types is required", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		a, err := c.AddApp(ctx, pos[0], types, readOnly)
		if err != nil {
			return apiErr(err)
		}
		mode := "read and write"
		if a.ReadOnly {
			mode = "read"
		}
		// The token alone on the last line, for scripts: it is not kept,
		// so this is the one time it is shown.
		fmt.Fprintf(stdout, "app %s may %s: %s\n", a.Name, mode, strings.Join(a.Types, ", "))
		fmt.Fprintln(stdout, "its token follows; syncd keeps only its digest, so store it now (give it to the app as its bearer token):")
		fmt.Fprintln(stdout, a.Token)
		return nil
	case "list":
		apps, err := c.Apps(ctx)
		if err != nil {
			return apiErr(err)
		}
		if asJSON {
			return printJSON(stdout, apps)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tACCESS\tTYPES\tCREATED")
		for _, a := range apps {
			access := "read-write"
			if a.ReadOnly {
				access = "read-only"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, access, strings.Join(a.Types, ","), a.CreatedAt.Local().Format(time.DateTime))
		}
		return tw.Flush()
	default: // remove
		if err := c.RemoveApp(ctx, pos[0]); err != nil {
			return apiErr(err)
		}
		fmt.Fprintf(stdout, "app %s removed: its token is refused from now on, and its event streams are closed\n", pos[0])
		return nil
	}
}

// typeList is --types: comma-separated, and repeatable (each adds).
type typeList []string

func (l *typeList) String() string { return strings.Join(*l, ",") }

func (l *typeList) Set(v string) error {
	for t := range strings.SplitSeq(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			*l = append(*l, t)
		}
	}
	return nil
}
