package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi/client"
)

// cmdStatus prints one screen: account, online, counts per state, oldest
// pending age, and the failed operations that need the user.
func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	cf, _, err := parseClientFlags("status", args, stderr, "status [--json] [--addr ADDR] [--data-dir DIR]", func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	})
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return apiErr(err)
	}
	failed, err := c.Operations(ctx, client.ListOptions{State: "permanent_failed", Limit: 20})
	if err != nil {
		return apiErr(err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			client.Status
			Failed []client.Operation `json:"failed"`
		}{st, failed.Items})
	}
	printStatus(stdout, st, failed.Items)
	return nil
}

func printStatus(w io.Writer, st client.Status, failed []client.Operation) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	account := "signed out"
	if st.SignedIn {
		account = st.AccountID
	}
	fmt.Fprintf(tw, "account:\t%s\n", account)
	sending := "online"
	switch {
	case st.Paused:
		sending = "paused (" + st.PauseReason + ")"
	case !st.Online:
		sending = "offline (will retry)"
	}
	fmt.Fprintf(tw, "sending:\t%s\n", sending)
	if p := st.RemoteProblem; p != nil {
		// One line each: what was seen, what to do, when syncd looks
		// again. The operations wait; none is failed for it.
		fmt.Fprintf(tw, "remote:\tmisconfigured (%s) since %s: %s\n", p.Kind, p.Since.Local().Format(time.DateTime), p.Seen)
		fmt.Fprintf(tw, "fix:\t%s\n", p.Fix)
		fmt.Fprintf(tw, "next check:\t%s (or at once on PUT /v1/session); operations wait, none fails for it\n", p.NextCheckAt.Local().Format(time.DateTime))
	}
	// Signed in, the queue is the account's; what other accounts left
	// queued waits for them and is only counted.
	counts, age := st.Counts, st.OldestPendingAgeSeconds
	if st.SignedIn && st.AccountCounts != nil {
		counts, age = st.AccountCounts, st.AccountOldestPendingAgeSeconds
	}
	var line []string
	for _, s := range []string{"pending", "sending", "retry_waiting", "permanent_failed", "done"} {
		line = append(line, fmt.Sprintf("%s %d", s, counts[s]))
	}
	fmt.Fprintf(tw, "queue:\t%s\n", strings.Join(line, ", "))
	oldest := "none"
	if age > 0 {
		oldest = config.FormatDuration((time.Duration(age * float64(time.Second))).Round(time.Second))
	}
	fmt.Fprintf(tw, "oldest unsent:\t%s\n", oldest)
	if others := unfinished(st.Counts) - unfinished(counts); others > 0 {
		fmt.Fprintf(tw, "other accounts:\t%d unsent, sent when their account signs in\n", others)
	}
	fmt.Fprintf(tw, "data file:\t%s (%s free)\n", bytesHuman(st.FileSizeBytes), bytesHuman(st.FreeBytes))
	switch {
	case st.QueueFull:
		fmt.Fprintf(tw, "queue:\tFULL: %s waiting to be sent, the limit (maxQueueBytes) is %s; creates and updates answer 507 storage_full until it drains (or raise the limit)\n", bytesHuman(st.QueuedBytes), bytesHuman(st.MaxQueueBytes))
	case st.MaxQueueBytes > 0:
		fmt.Fprintf(tw, "queue:\t%s waiting to be sent, of at most %s\n", bytesHuman(st.QueuedBytes), bytesHuman(st.MaxQueueBytes))
	default:
		fmt.Fprintf(tw, "queue:\t%s waiting to be sent, no limit\n", bytesHuman(st.QueuedBytes))
	}
	fmt.Fprintf(tw, "pull:\t%s\n", pullLine(st.Pull))
	if st.App != nil {
		access := "read and write"
		if st.App.ReadOnly {
			access = "read"
		}
		fmt.Fprintf(tw, "token:\tapp %s (may %s %s); counts are its types'\n", st.App.Name, access, strings.Join(st.App.Types, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(st.Apps)) {
		c := st.Apps[name]
		fmt.Fprintf(tw, "app %s:\t%d unsent, %d failed, %d done (operations it made, every account)\n", name, unfinished(c)-c["permanent_failed"], c["permanent_failed"], c["done"])
	}
	fmt.Fprintf(tw, "last event:\t%d\n", st.LastEventSeq)
	tw.Flush()
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(w, "\nneeds your attention (%d failed):\n", len(failed))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, op := range failed {
		fmt.Fprintf(tw, "  %s\t%s %s/%s\t%s\t%s\n", op.ID, op.Type, op.EntityType, op.EntityID, op.LastErrorCode, op.LastError)
	}
	tw.Flush()
	if slices.ContainsFunc(failed, func(op client.Operation) bool { return op.Declined }) {
		// The server refused them: a fix of the data in the app sends
		// them again by itself.
		fmt.Fprintln(w, "\nfix with: the app (update the entity: it goes again at once) | syncd ops retry ID | syncd ops discard ID")
		return
	}
	fmt.Fprintln(w, "\nfix with: syncd ops retry ID | syncd ops discard ID")
}

// pullLine describes the pull of the server's changes.
func pullLine(p client.PullStatus) string {
	line := p.State
	switch p.State {
	case "off":
		if p.Mode == "off" {
			return "off (pull: off)"
		}
		return "off (the remote has no changes feed; syncing one way)"
	case "bootstrapping":
		line += fmt.Sprintf(", %d records read so far", p.BootstrapReceived)
		if p.BootstrapProgress > 0 {
			line += fmt.Sprintf(" (about %d%%)", int(p.BootstrapProgress*100))
		}
	case "error":
		line += ": " + p.LastError + " (retrying)"
	}
	if !p.LastPullAt.IsZero() {
		line += fmt.Sprintf("; last %s, %d changes received", p.LastPullAt.Local().Format(time.DateTime), p.Received)
	}
	return line
}

// unfinished is the number of operations not done.
func unfinished(counts map[string]int) int {
	return counts["pending"] + counts["sending"] + counts["retry_waiting"] + counts["permanent_failed"]
}

func bytesHuman(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
