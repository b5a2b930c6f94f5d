package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/localapi"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/service"
	"github.com/syncd/syncd/transport"
)

// A check's outcome. Warn and fail need attention: doctor exits 1.
const (
	checkOK   = "ok"
	checkInfo = "info" // worth knowing, nothing to do
	checkWarn = "warn"
	checkFail = "fail"
)

// check is one line of `syncd doctor`: what was looked at, what was
// seen and, when it needs attention, how to fix it.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Thresholds of doctor's checks.
const (
	doctorClockSkew    = 30 * time.Second // syncd's clock against the server's Date
	doctorOldestUnsent = time.Hour        // an operation waiting longer needs a look
	doctorFreeShare    = 0.5              // free pages above this share of a file ...
	doctorFreeMinBytes = 64 << 20         // ... this big: compact it
)

// doctor is one run of the checks; now is the clock (a test seam).
type doctor struct {
	cf          *clientFlags
	serviceName string
	user        bool
	now         func() time.Time
	httpClient  *http.Client
	checks      []check
}

func (d *doctor) add(name, status, detail, fix string) {
	d.checks = append(d.checks, check{Name: name, Status: status, Detail: detail, Fix: fix})
}

// cmdDoctor is `syncd doctor [--json]`.
func cmdDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var asJSON bool
	var serviceName string
	cf, pos, err := parseClientFlags("doctor", args, stderr, "doctor [--json] [--data-dir DIR] [--addr ADDR] [--service-name NAME]", func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the checks as JSON")
		fs.StringVar(&serviceName, "service-name", cmp.Or(os.Getenv("SYNCD_SERVICE_NAME"), config.DefaultServiceName), "name of the OS service to look at (env SYNCD_SERVICE_NAME)")
	})
	var several errSeveralDaemons
	switch {
	case errors.As(err, &several):
		// That is a finding, not a usage error.
		d := &doctor{}
		d.add("daemon", checkFail, several.Error(), "name one: syncd doctor --data-dir DIR")
		return d.report(stdout, asJSON)
	case err != nil:
		return err
	case len(pos) > 0:
		return fmt.Errorf("%w: doctor: unexpected argument %q", errUsage, pos[0])
	}
	d := &doctor{cf: cf, serviceName: serviceName, user: config.DefaultScope() == config.User, now: time.Now,
		httpClient: &http.Client{Timeout: 5 * time.Second}}
	d.run(ctx)
	return d.report(stdout, asJSON)
}

// run makes the checks, in the order a person would: is it running,
// may I talk to it, what does it say about the remote, the clock, the
// file and the queue.
func (d *doctor) run(ctx context.Context) {
	d.checkService()
	tokenFile := cmp.Or(d.cf.tokenFile, filepath.Join(d.cf.dataDir, localapi.TokenFileName))
	if _, err := os.ReadFile(tokenFile); err != nil {
		d.add("daemon", checkFail, fmt.Sprintf("no syncd of yours answers (no token at %s)", tokenFile),
			"start it: "+d.startHint()+"; or name the data directory of a syncd started elsewhere: --data-dir DIR")
		return
	}
	d.add("token", checkOK, "readable: "+tokenFile, "")
	d.checkSocket()
	c, err := d.cf.client()
	if err != nil {
		d.add("daemon", checkFail, err.Error(), "start it: "+d.startHint())
		return
	}
	st, err := c.Status(ctx)
	var apiError *client.Error
	switch {
	case errors.As(err, &apiError) && apiError.Status == http.StatusUnauthorized:
		d.add("daemon", checkFail, fmt.Sprintf("the syncd at %s refuses the token in %s", d.where(), tokenFile),
			"the token belongs to another syncd: name its --data-dir (or --token-file), or restart this one so it writes its token again")
		return
	case err != nil:
		d.add("daemon", checkFail, fmt.Sprintf("syncd does not answer at %s: %s", d.where(), plainMessage(err.Error())), "start it: "+d.startHint())
		return
	}
	detail := "answers at " + d.where() + ", data directory " + d.cf.dataDir
	if n := d.note(); n != nil {
		detail += fmt.Sprintf(", pid %d, version %s", n.PID, n.Version)
	}
	d.add("daemon", checkOK, detail, "")
	d.checkAccount(st)
	d.checkRemote(ctx, st)
	d.checkFile(st)
	d.checkDisk()
	d.checkQueue(ctx, c, st)
}

// Below either, the disk holding the data directory is nearly full.
const (
	doctorDiskMinFree  = 256 << 20
	doctorDiskMinShare = 0.05
)

// checkDisk: the data directory's disk has room. A full disk refuses
// every write (syncd answers 507 rather than lose one) and stops the
// queue's outcomes from being recorded.
func (d *doctor) checkDisk() {
	free, total, err := diskSpace(d.cf.dataDir)
	if err != nil {
		d.add("disk", checkWarn, "its free space could not be read: "+err.Error(), "")
		return
	}
	detail := fmt.Sprintf("%s free of %s", bytesHuman(int64(free)), bytesHuman(int64(total)))
	if free < doctorDiskMinFree || float64(free) < doctorDiskMinShare*float64(total) {
		d.add("disk", checkWarn, detail+": nearly full; at full, syncd refuses writes", "free space on the disk holding "+d.cf.dataDir)
		return
	}
	d.add("disk", checkOK, detail, "")
}

func (d *doctor) where() string {
	if d.cf.socket != "" {
		return "unix:" + d.cf.socket
	}
	return d.cf.addr
}

// note is the running note of the daemon talked to, if there is one.
func (d *doctor) note() *runningNote {
	if d.cf.found != nil {
		return d.cf.found
	}
	notes, _ := runningDaemons(context.Background(), os.Getenv)
	for _, n := range notes {
		if filepath.Clean(n.DataDir) == filepath.Clean(d.cf.dataDir) {
			return &n
		}
	}
	return nil
}

func (d *doctor) startHint() string {
	return "syncd service start" + flagsHint(d.serviceName, d.user) + " (installed) or syncd run"
}

// checkService reports the OS service: worth knowing, a problem only
// when the daemon does not answer (then the run check says so).
func (d *doctor) checkService() {
	m, err := service.New(service.Config{Name: d.serviceName, User: d.user})
	if err != nil {
		d.add("service", checkInfo, plainMessage(err.Error()), "")
		return
	}
	st, err := m.Status()
	switch {
	case err != nil:
		d.add("service", checkInfo, plainMessage(err.Error()), "")
	case st == service.NotInstalled:
		d.add("service", checkInfo, fmt.Sprintf("%s (%s) is not installed", m.Name(), m.Kind()),
			"to run syncd at login: syncd service install"+flagsHint(d.serviceName, d.user))
	default:
		d.add("service", checkInfo, fmt.Sprintf("%s (%s) is %s; logs: %s", m.Name(), m.Kind(), st, m.Logs()), "")
	}
}

func (d *doctor) checkAccount(st client.Status) {
	if !st.SignedIn {
		d.add("account", checkWarn, "signed out: nothing is sent", "an app signs in (PUT /v1/session) with the account's access token")
		return
	}
	d.add("account", checkOK, "signed in as "+st.AccountID, "")
}

// checkRemote reports what the daemon says of the remote, then looks at
// the remote itself: does it answer, does it list capabilities, does
// its clock agree with ours.
func (d *doctor) checkRemote(ctx context.Context, st client.Status) {
	switch {
	case st.RemoteProblem != nil:
		p := st.RemoteProblem
		d.add("remote", checkFail, fmt.Sprintf("misconfigured (%s): %s", p.Kind, p.Seen), p.Fix)
	case st.Paused:
		d.add("remote", checkFail, "sending paused: "+st.PauseReason,
			"sign in again with a token the server accepts (PUT /v1/session); syncd sends again at once")
	case !st.Online && st.SignedIn:
		d.add("remote", checkFail, "unreachable: syncd is offline and retries by itself",
			"check the network and the remote's URL (--remote); syncd goes on the moment it answers")
	case st.SignedIn:
		d.add("remote", checkOK, "online", "")
	}
	if st.Pull.State == "error" {
		d.add("pull", checkWarn, "pulling the server's changes fails: "+st.Pull.LastError, "syncd retries by itself; see the log")
	}
	n := d.note()
	if n == nil || n.Remote == "" || strings.Contains(n.Remote, "REDACTED") {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(n.Remote, "/")+transport.CapabilitiesPath, nil)
	if err != nil {
		return
	}
	sent := d.now()
	res, err := d.httpClient.Do(req)
	if err != nil {
		d.add("remote server", checkFail, fmt.Sprintf("%s does not answer: %v", n.Remote, err), "check the network, and the URL syncd was started with (--remote)")
		return
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	got := d.now()
	if res.StatusCode == http.StatusOK {
		caps, err := transport.ParseCapabilities(body)
		if err == nil {
			d.add("remote server", checkOK, fmt.Sprintf("%s answers; capabilities: batch %v, changes feed %v", n.Remote, caps.Batch != nil, caps.Changes), "")
		} else {
			d.add("remote server", checkOK, fmt.Sprintf("%s answers (no capabilities: syncd sends one operation at a time)", n.Remote), "")
		}
	} else {
		// Reachable; its capabilities are for the account's token,
		// which syncd holds and doctor does not.
		status := checkOK
		if res.StatusCode >= 500 {
			status = checkWarn
		}
		d.add("remote server", status, fmt.Sprintf("%s answers (%s to a GET %s without the account's token)", n.Remote, res.Status, transport.CapabilitiesPath), "")
	}
	date, err := http.ParseTime(res.Header.Get("Date"))
	if err != nil {
		return
	}
	// The server's second is somewhere in the round trip.
	mid := sent.Add(got.Sub(sent) / 2)
	skew := mid.Sub(date)
	if skew < 0 {
		skew = -skew
	}
	if skew > doctorClockSkew+got.Sub(sent) {
		d.add("clock", checkWarn, fmt.Sprintf("this machine's clock is %s off the server's", config.FormatDuration(skew.Round(time.Second))),
			"turn on network time (timedatectl set-ntp true; on macOS and Windows: set the time automatically)")
		return
	}
	d.add("clock", checkOK, "agrees with the server's (within "+config.FormatDuration(doctorClockSkew)+")", "")
}

func (d *doctor) checkFile(st client.Status) {
	detail := fmt.Sprintf("%s, %s of it free pages", bytesHuman(st.FileSizeBytes), bytesHuman(st.FreeBytes))
	if st.FileSizeBytes >= doctorFreeMinBytes && float64(st.FreeBytes) > doctorFreeShare*float64(st.FileSizeBytes) {
		d.add("data file", checkWarn, detail, "stop syncd and run syncd compact (syncd also compacts at start when it is worth it)")
	} else {
		d.add("data file", checkOK, detail, "")
	}
	if st.QueueFull {
		d.add("queue size", checkFail, fmt.Sprintf("full: %s waiting to be sent, the limit is %s; creates and updates are refused", bytesHuman(st.QueuedBytes), bytesHuman(st.MaxQueueBytes)),
			"get the remote reachable so the queue drains, or raise maxQueueBytes")
	}
}

func (d *doctor) checkQueue(ctx context.Context, c *client.Client, st client.Status) {
	age := time.Duration(st.OldestPendingAgeSeconds * float64(time.Second)).Round(time.Second)
	switch {
	case age == 0:
		d.add("queue", checkOK, "nothing waits to be sent", "")
	case age > doctorOldestUnsent:
		d.add("queue", checkWarn, fmt.Sprintf("%d unsent, the oldest for %s", unfinished(st.Counts), config.FormatDuration(age)), "see why: syncd ops list")
	default:
		d.add("queue", checkOK, fmt.Sprintf("%d unsent, the oldest for %s", unfinished(st.Counts), config.FormatDuration(age)), "")
	}
	n := st.Counts["permanent_failed"]
	if n == 0 {
		return
	}
	failed, err := c.Operations(ctx, client.ListOptions{State: "permanent_failed", Limit: 3})
	var last []string
	if err == nil {
		for _, op := range failed.Items {
			last = append(last, fmt.Sprintf("%s %s/%s: %s", op.ID, op.EntityType, op.EntityID, cmp.Or(op.LastErrorCode, op.LastError)))
		}
	}
	d.add("failed operations", checkWarn, fmt.Sprintf("%d failed for good; last: %s", n, strings.Join(last, "; ")),
		"syncd ops list --state permanent_failed, then syncd ops retry ID or syncd ops discard ID")
}

// report prints the checks and returns an exit error when one needs
// attention.
func (d *doctor) report(w io.Writer, asJSON bool) error {
	attention := 0
	for _, c := range d.checks {
		if c.Status == checkWarn || c.Status == checkFail {
			attention++
		}
	}
	if asJSON {
		if err := printJSON(w, struct {
			Healthy bool    `json:"healthy"`
			Checks  []check `json:"checks"`
		}{attention == 0, d.checks}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range d.checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, c.Detail)
			if c.Fix != "" && c.Status != checkOK {
				fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
			}
		}
		tw.Flush()
		if attention == 0 {
			fmt.Fprintln(w, "\nsyncd is healthy")
		}
	}
	if attention > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("doctor: %d %s need attention", attention, plural(attention, "check", "checks"))}
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
