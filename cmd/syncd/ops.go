package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi/client"
)

// cmdOps is `syncd ops list|show|retry|discard`.
func cmdOps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "ops list [--state STATE] [--limit N] [--json] | ops show ID | ops retry ID | ops discard ID"
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		return fmt.Errorf("%w: ops: no subcommand", errUsage)
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stderr, "usage: syncd "+usage)
		fmt.Fprintln(stderr, "\n'syncd ops <subcommand> --help' lists a subcommand's flags.")
		return flag.ErrHelp
	}
	if !slices.Contains([]string{"list", "show", "retry", "discard"}, args[0]) {
		return fmt.Errorf("%w: ops: unknown subcommand %q (want list, show, retry or discard)", errUsage, args[0])
	}
	sub, args := args[0], args[1:]
	var (
		state  string
		limit  int
		asJSON bool
	)
	cf, pos, err := parseClientFlags("ops "+sub, args, stderr, usage, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		if sub == "list" {
			fs.StringVar(&state, "state", "", "only operations in this state (pending, sending, retry_waiting, permanent_failed, done)")
			fs.IntVar(&limit, "limit", 50, "at most this many operations")
		}
	})
	if err != nil {
		return err
	}
	needID := func() (string, error) {
		if len(pos) != 1 {
			return "", fmt.Errorf("%w: ops %s: want exactly one operation id", errUsage, sub)
		}
		return pos[0], nil
	}
	switch sub {
	case "list", "show", "retry", "discard":
	default:
		return fmt.Errorf("%w: ops: unknown subcommand %q (want list, show, retry or discard)", errUsage, sub)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(pos) > 0 {
			return fmt.Errorf("%w: ops list: unexpected argument %q", errUsage, pos[0])
		}
		l, err := c.Operations(ctx, client.ListOptions{State: state, Limit: limit})
		if err != nil {
			return apiErr(err)
		}
		if asJSON {
			return printJSON(stdout, l)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tOP\tENTITY\tAPP\tATTEMPTS\tAGE\tERROR\tFIELDS")
		for _, op := range l.Items {
			state, why := op.State, op.LastErrorCode
			if op.Blocked {
				// Held by its ordered group: say for what.
				state, why = "blocked", "waits for "+op.BlockedBy
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%d\t%s\t%s\t%s\n", op.ID, state, op.Type, op.EntityType, op.EntityID, cmp.Or(op.App, "-"), op.AttemptCount, config.FormatDuration(time.Since(op.CreatedAt).Round(time.Second)), cmp.Or(why, "-"), fieldsOf(op))
		}
		return tw.Flush()
	case "show":
		id, err := needID()
		if err != nil {
			return err
		}
		op, err := c.Operation(ctx, id)
		if err != nil {
			return apiErr(err)
		}
		return printJSON(stdout, op)
	case "retry":
		id, err := needID()
		if err != nil {
			return err
		}
		op, err := c.Retry(ctx, id)
		if err != nil {
			return apiErr(err)
		}
		if asJSON {
			return printJSON(stdout, op)
		}
		fmt.Fprintf(stdout, "operation %s is %s again\n", op.ID, op.State)
		return nil
	default: // discard
		id, err := needID()
		if err != nil {
			return err
		}
		if err := c.Discard(ctx, id); err != nil {
			return apiErr(err)
		}
		fmt.Fprintf(stdout, "operation %s discarded\n", id)
		return nil
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fieldsOf is the FIELDS column of ops list: the fields an update
// changes (a merging server applies only those), at most three then a
// count; "all" for a write of the whole data.
func fieldsOf(op client.Operation) string {
	switch {
	case op.Type != "update":
		return "-"
	case op.Paths == nil:
		return "all"
	case len(op.Paths) == 0:
		return "none"
	case len(op.Paths) > 3:
		return fmt.Sprintf("%s +%d", strings.Join(op.Paths[:3], ","), len(op.Paths)-3)
	}
	return strings.Join(op.Paths, ",")
}
