package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/syncd/syncd/localapi/client"
)

// cmdEvents prints the live event stream, one line per event, until
// interrupted. It resumes on its own after a dropped connection.
func cmdEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		since    uint64
		sinceSet bool
		asJSON   bool
		types    string
		etype    string
		count    int
	)
	cf, pos, err := parseClientFlags("events", args, stderr, "events [--since N] [--type T,...] [--entity-type E] [--json] [--count N]", func(fs *flag.FlagSet) {
		fs.Func("since", "replay the kept events after seq `N` first (0: all kept); default: only new events", func(v string) error {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return errors.New("want an event seq (a non-negative integer)")
			}
			since, sinceSet = n, true
			return nil
		})
		fs.BoolVar(&asJSON, "json", false, "one JSON object per line, for scripts")
		fs.StringVar(&types, "type", "", "comma-separated event types or prefixes (entity., operation., session.)")
		fs.StringVar(&etype, "entity-type", "", "only events of this entity type")
		fs.IntVar(&count, "count", 0, "exit after this many events (0: run until interrupted)")
	})
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: events: unexpected argument %q", errUsage, pos[0])
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if !sinceSet {
		st, err := c.Status(ctx)
		if err != nil {
			return apiErr(err)
		}
		since = st.LastEventSeq
	}
	opts := client.SubscribeOptions{Since: since, EntityType: etype}
	if types != "" {
		opts.Types = strings.Split(types, ",")
	}
	sub, err := c.Subscribe(ctx, opts)
	if err != nil {
		return apiErr(err)
	}
	defer sub.Close()
	for n := 0; count == 0 || n < count; n++ {
		e, err := sub.Next(ctx)
		if err != nil {
			return apiErr(err)
		}
		if asJSON {
			stdout.Write(eventJSON(e))
			continue
		}
		fmt.Fprintln(stdout, eventLine(e))
	}
	return nil
}

// eventJSON is the --json form of an event: one line, its data as the
// daemon sent it, compacted (json.Marshal would write '<', '>' and '&'
// as \u003c, \u003e and \u0026).
func eventJSON(e client.Event) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		msg, _ := json.Marshal(err.Error())
		fmt.Fprintf(&b, "{\"seq\":%d,\"error\":%s}\n", e.Seq, msg)
	}
	return b.Bytes()
}

// eventLine is the human form of an event: one line of printable text,
// whatever its fields hold (an error code or an id may come from a
// server or an app: neither may break the line or send the terminal a
// control sequence).
func eventLine(e client.Event) string { return printable(eventText(e)) }

// printable escapes, Go style, what a terminal would not show as text:
// control characters, line and paragraph separators, invalid UTF-8.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029':
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func eventText(e client.Event) string {
	ts := e.Time.Local().Format("15:04:05.000")
	subject := ""
	if e.EntityType != "" {
		subject = e.EntityType + "/" + e.EntityID
	}
	head := fmt.Sprintf("%6d  %s  %-20s", e.Seq, ts, e.Type)
	switch {
	case e.Type == client.EventResync:
		return fmt.Sprintf("%6d  %s  resync: events before this were dropped; re-read state", e.Seq, ts)
	case strings.HasPrefix(e.Type, "entity."):
		return fmt.Sprintf("%s %-24s %s", head, subject, e.SyncState)
	case strings.HasPrefix(e.Type, "operation."):
		s := fmt.Sprintf("%s %-24s %s op=%s", head, subject, e.State, e.OperationID)
		if e.ErrorCode != "" {
			s += " error=" + e.ErrorCode
		}
		if e.MergedInto != "" {
			s += " merged_into=" + e.MergedInto
		}
		return s
	case e.Type == "queue.totals":
		var d struct {
			Counts        map[string]int `json:"counts"`
			AccountID     string         `json:"accountId"`
			AccountCounts map[string]int `json:"accountCounts"`
		}
		if json.Unmarshal(e.Data, &d) == nil {
			// As syncd status: the signed-in account's queue, and what
			// other accounts left queued only counted.
			counts := d.Counts
			if d.AccountCounts != nil {
				counts = d.AccountCounts
			}
			var parts []string
			for _, st := range []string{"pending", "sending", "retry_waiting", "permanent_failed", "done"} {
				parts = append(parts, fmt.Sprintf("%s %d", st, counts[st]))
			}
			s := head + " " + strings.Join(parts, ", ")
			if d.AccountCounts != nil {
				s += " account=" + d.AccountID
			}
			if others := unfinished(d.Counts) - unfinished(counts); others > 0 {
				s += fmt.Sprintf(" other_accounts_unsent=%d", others)
			}
			return s
		}
	case e.Type == "connectivity.changed":
		var d struct{ Online bool }
		if json.Unmarshal(e.Data, &d) == nil {
			if d.Online {
				return head + " online"
			}
			return head + " offline"
		}
	case e.Type == "session.changed":
		return head + " account=" + e.AccountID
	}
	s := head
	if e.AccountID != "" {
		s += " account=" + e.AccountID
	}
	if len(e.Data) > 0 {
		var c bytes.Buffer
		if json.Compact(&c, e.Data) == nil {
			s += " " + c.String()
		} else {
			s += " " + string(e.Data)
		}
	}
	return s
}
