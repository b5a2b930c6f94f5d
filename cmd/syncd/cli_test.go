package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/localapi/client"
	"github.com/syncd/syncd/localapi/localapitest"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// cliEnv is a real local API and a token file for the client commands.
type cliEnv struct {
	*localapitest.Env
	t         *testing.T
	tokenFile string
}

func startCLI(t *testing.T, o localapitest.Options) *cliEnv {
	t.Helper()
	e := localapitest.Start(t, o)
	tf := filepath.Join(t.TempDir(), "api-token")
	if err := os.WriteFile(tf, []byte(localapitest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &cliEnv{Env: e, t: t, tokenFile: tf}
}

// exitStatus is the code main exits with for err.
func exitStatus(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	return exitCode(err)
}

// syncd runs one client command in-process against the env and returns
// its stdout, stderr and exit code.
func (c *cliEnv) syncd(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	// The flags go after the subcommand (and after ops' verb).
	at := 1
	if (args[0] == "ops" || args[0] == "apps") && len(args) > 1 {
		at = 2
	}
	full := append(append(append([]string{}, args[:at]...), "--addr", c.Addr, "--token-file", c.tokenFile), args[at:]...)
	var out, errOut bytes.Buffer
	err := run(full, &out, &errOut)
	if err != nil {
		errOut.WriteString("syncd: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitStatus(err)
}

func (c *cliEnv) must(args ...string) string {
	c.t.Helper()
	out, errOut, code := c.syncd(args...)
	if code != 0 {
		c.t.Fatalf("syncd %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func (c *cliEnv) write(id string) queue.Result {
	c.t.Helper()
	res, err := c.Store.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "note", EntityID: id, Data: json.RawMessage(`{"title":"x"}`)})
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

// fail fails the next ready operation as a worker would after a 400.
func (c *cliEnv) fail() string {
	c.t.Helper()
	ctx := context.Background()
	op, err := c.Store.Claim(ctx, "alice", "test-worker", time.Minute)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := c.Store.Fail(ctx, op.ID, "test-worker", "validation", "title is required", false); err != nil {
		c.t.Fatal(err)
	}
	return op.ID
}

func contains(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

func TestCLIStatus(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{})
	out := c.must("status")
	contains(t, "signed out", out, "account:        signed out", "sending:        paused (signed_out)", "queue:          pending 0,", "oldest unsent:  none")

	if err := c.Daemon.SetSession(context.Background(), "alice", "alice.1"); err != nil {
		t.Fatal(err)
	}
	c.write("n1")
	c.write("n2")
	failed := c.fail()
	out = c.must("status")
	contains(t, "with a failed op", out, "account:        alice", "sending:        offline (will retry)",
		"queue:          pending 1, sending 0, retry_waiting 0, permanent_failed 1, done 0",
		"needs your attention (1 failed):", failed, "validation", "title is required", "syncd ops retry ID")

	var st struct {
		AccountID string         `json:"accountId"`
		Counts    map[string]int `json:"counts"`
		Failed    []struct {
			ID string `json:"id"`
		} `json:"failed"`
		LastEventSeq uint64 `json:"lastEventSeq"`
	}
	if err := json.Unmarshal([]byte(c.must("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.AccountID != "alice" || st.Counts["pending"] != 1 || len(st.Failed) != 1 || st.Failed[0].ID != failed || st.LastEventSeq == 0 {
		t.Errorf("status --json: %+v", st)
	}

	// A failure the server declined can be fixed in the app.
	op, err := c.Store.Claim(context.Background(), "alice", "test-worker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Store.Decline(context.Background(), op.ID, "test-worker", "validation", "title is required"); err != nil {
		t.Fatal(err)
	}
	contains(t, "with a declined op", c.must("status"), "needs your attention (2 failed):", "fix with: the app (update the entity")

	// Another account signs in; alice's operations stay queued for her.
	// The queue shown is bob's, and alice's are only counted.
	if err := c.Daemon.SetSession(context.Background(), "bob", "bob.1"); err != nil {
		t.Fatal(err)
	}
	out = c.must("status")
	contains(t, "another account", out, "account:         bob",
		"queue:           pending 0, sending 0, retry_waiting 0, permanent_failed 0, done 0",
		"oldest unsent:   none", "other accounts:  2 unsent")
	if strings.Contains(out, "needs your attention") {
		t.Errorf("bob's status lists alice's failed op:\n%s", out)
	}
	var bob struct {
		Counts        map[string]int `json:"counts"`
		AccountCounts map[string]int `json:"accountCounts"`
	}
	if err := json.Unmarshal([]byte(c.must("status", "--json")), &bob); err != nil {
		t.Fatal(err)
	}
	if bob.Counts["permanent_failed"] != 2 || bob.AccountCounts == nil || bob.AccountCounts["pending"] != 0 || bob.AccountCounts["permanent_failed"] != 0 {
		t.Errorf("bob's status --json: %+v", bob)
	}
}

func TestCLIOps(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{Account: "alice"})
	c.write("n1")
	c.write("n2")
	id := c.fail()

	out := c.must("ops", "list")
	contains(t, "ops list", out, "ID", "STATE", "ATTEMPTS", "FIELDS", id, "permanent_failed", "create  note/n", "validation")
	if n := strings.Count(out, "\n"); n != 3 {
		t.Errorf("ops list: %d lines, want a header and 2 rows:\n%s", n, out)
	}
	out = c.must("ops", "list", "--state", "pending")
	if strings.Contains(out, id) || strings.Count(out, "\n") != 2 {
		t.Errorf("ops list --state pending:\n%s", out)
	}
	// An update lists the fields it changes.
	if _, err := c.Store.Apply(context.Background(), queue.Write{Op: queue.OpUpdate, AccountID: "alice", EntityType: "note", EntityID: "n2",
		Data: json.RawMessage(`{"title":"y","tags":null}`)}); err != nil {
		t.Fatal(err)
	}
	contains(t, "ops list with an update", c.must("ops", "list", "--state", "pending"), "update  note/n2", "/tags,/title")
	var page struct {
		Items []struct{ ID, State string }
	}
	if err := json.Unmarshal([]byte(c.must("ops", "list", "--json", "--state", "permanent_failed")), &page); err != nil || len(page.Items) != 1 || page.Items[0].ID != id {
		t.Errorf("ops list --json: %+v, %v", page, err)
	}
	var op struct{ ID, State, LastErrorCode string }
	// Flags may follow the argument.
	out, errOut, code := run2(c, "ops", "show", id, "--addr", c.Addr, "--token-file", c.tokenFile)
	if code != 0 {
		t.Fatalf("ops show ID --flags: exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &op); err != nil || op.ID != id || op.State != "permanent_failed" || op.LastErrorCode != "validation" {
		t.Errorf("ops show: %+v, %v", op, err)
	}

	contains(t, "ops retry", c.must("ops", "retry", id), "operation "+id+" is pending again")
	_, errOut, code = c.syncd("ops", "retry", id)
	if code != exitFailure || !strings.Contains(errOut, "illegal_transition") {
		t.Errorf("retry of a pending op: exit %d: %s", code, errOut)
	}
	id = c.fail()
	contains(t, "ops discard", c.must("ops", "discard", id), "operation "+id+" discarded")
	for _, args := range [][]string{{"ops", "show", id}, {"ops", "retry", id}, {"ops", "discard", id}} {
		if _, errOut, code := c.syncd(args...); code != exitNotFound || !strings.Contains(errOut, "not_found") {
			t.Errorf("%v of a gone op: exit %d: %s", args, code, errOut)
		}
	}
}

// syncd apps add prints the token alone on its last line; the app's
// writes show its name in ops list and status; apps list never shows a
// token; apps remove revokes it.
func TestCLIApps(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{Account: "alice"})
	out := c.must("apps", "add", "notes", "--types", "note", "--types", " tag")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	token := lines[len(lines)-1]
	if !strings.HasPrefix(token, "syncd_app_") || len(token) != len("syncd_app_")+64 {
		t.Fatalf("apps add: last line %q is not the token:\n%s", token, out)
	}
	contains(t, "apps add", out, "app notes may read and write: note, tag")
	app, err := client.New(client.Config{Addr: c.Addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer app.CloseIdleConnections()
	if _, err := app.Create(context.Background(), "note", "n1", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Create(context.Background(), "task", "t1", map[string]any{"a": 1}); !client.IsCode(err, "type_not_granted") {
		t.Fatalf("the notes app wrote a task: %v", err)
	}
	contains(t, "ops list", c.must("ops", "list"), "APP", "note/n1  notes")
	contains(t, "status", c.must("status"), "app notes:", "1 unsent, 0 failed, 0 done")
	list := c.must("apps", "list")
	contains(t, "apps list", list, "notes", "read-write", "note,tag")
	if strings.Contains(list, token[len("syncd_app_"):]) {
		t.Errorf("apps list shows the token:\n%s", list)
	}
	_, errOut, code := c.syncd("apps", "add", "notes", "--types", "note")
	if code == 0 || !strings.Contains(errOut, "app_exists") {
		t.Errorf("apps add of a taken name: exit %d: %s", code, errOut)
	}
	if _, _, code := c.syncd("apps", "add", "x"); code != exitUsage {
		t.Errorf("apps add without --types: exit %d", code)
	}
	contains(t, "apps remove", c.must("apps", "remove", "notes"), "app notes removed")
	if _, err := app.Get(context.Background(), "note", "n1"); !client.IsCode(err, "unauthorized") {
		t.Fatalf("a removed app's token: %v", err)
	}
}

func TestCLIEvents(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{Account: "alice"})
	c.write("n1") // seqs 2, 3 (1: session)

	out := c.must("events", "--since", "0", "--count", "3")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("events: %d lines:\n%s", len(lines), out)
	}
	contains(t, "events", lines[0], "     1  ", "session.changed", "account=alice")
	contains(t, "events", lines[1], "     2  ", "entity.changed", "note/n1", "pending")
	contains(t, "events", lines[2], "     3  ", "operation.state", "note/n1", "pending op=")

	out = c.must("events", "--since", "1", "--count", "2", "--json", "--type", "entity.,operation.")
	var evs []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("events --json line %q: %v", l, err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 2 || evs[0]["seq"] != 2.0 || evs[1]["type"] != "operation.state" || evs[1]["entityId"] != "n1" {
		t.Errorf("events --json: %v", evs)
	}

	// Without --since: only what happens from now on.
	done := make(chan string)
	go func() {
		out, _, _ := c.syncd("events", "--count", "1")
		done <- out
	}()
	// The command subscribes after the status's last seq. Write tasks
	// until it prints: its one line must be a task, never the older
	// session or note events.
	var got string
	for i := 0; got == ""; i++ {
		if _, err := c.Store.Apply(context.Background(), queue.Write{Op: queue.OpCreate, AccountID: "alice", EntityType: "task", EntityID: fmt.Sprintf("t%d", i), Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-done:
		case <-time.After(20 * time.Millisecond):
		}
	}
	contains(t, "events from now", got, "entity.changed", "task/t", "pending")

	// Resync: a since beyond the log.
	contains(t, "resync", c.must("events", "--since", "999", "--count", "1"), "resync: events before this were dropped; re-read state")
}

func TestCLIExitCodes(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{Account: "alice"})
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown ops verb", []string{"ops", "frob"}, exitUsage, "unknown subcommand"},
		{"show without id", []string{"ops", "show"}, exitUsage, "want exactly one operation id"},
		{"bad flag", []string{"status", "--frob"}, exitUsage, "frob"},
		{"events with an argument", []string{"events", "x"}, exitUsage, "unexpected argument"},
		{"bad since", []string{"events", "--since", "-1"}, exitUsage, "want an event seq"},
		{"two ids", []string{"ops", "show", "a", "b"}, exitUsage, "want exactly one operation id"},
		{"bad state", []string{"ops", "list", "--state", "nope"}, exitFailure, "invalid_request"},
	}
	for _, tc := range cases {
		_, errOut, code := c.syncd(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, want %d; stderr %q lacks %q", tc.name, code, tc.code, errOut, tc.want)
		}
	}

	// Wrong token: the API refuses (1). No token file or no syncd at the
	// address: unreachable (3).
	bad := filepath.Join(t.TempDir(), "bad-token")
	os.WriteFile(bad, []byte("nope"), 0o600)
	var out, errOut bytes.Buffer
	if code := exitStatus(run([]string{"status", "--addr", c.Addr, "--token-file", bad}, &out, &errOut)); code != exitFailure {
		t.Errorf("wrong token: exit %d", code)
	}
	if code := exitStatus(run([]string{"status", "--addr", c.Addr, "--token-file", filepath.Join(t.TempDir(), "none")}, &out, &errOut)); code != exitUnreachable {
		t.Errorf("no token file: exit %d", code)
	}
	for _, args := range [][]string{{"status"}, {"ops", "list"}, {"events"}} {
		full := append(append([]string{}, args...), "--addr", "127.0.0.1:1", "--token-file", c.tokenFile)
		if code := exitStatus(run(full, &out, &errOut)); code != exitUnreachable {
			t.Errorf("%v with no syncd: exit %d", args, code)
		}
	}
}

// run2 runs syncd with exactly args (no flags added).
func run2(c *cliEnv, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	err := run(args, &out, &errOut)
	if err != nil {
		errOut.WriteString("syncd: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitStatus(err)
}

// The client commands find the daemon that a config file describes, as
// `syncd run --config` runs it: its listen address and data directory
// (where the token is). Flags win over the file.
func TestCLIConfigFile(t *testing.T) {
	clearEnv(t) // not parallel: the shell's SYNCD_* would change the answers
	c := startCLI(t, localapitest.Options{Account: "alice"})
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "api-token"), []byte(localapitest.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(c.Addr, ":")
	writeConfig := func(body string) string {
		f := filepath.Join(t.TempDir(), "syncd.json")
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	dirJSON, _ := json.Marshal(dataDir)
	cfg := writeConfig(fmt.Sprintf(`{"listen": %q, "dataDir": %s}`, c.Addr, dirJSON))
	// A daemon forced onto every interface is dialled on loopback.
	wildcard := writeConfig(fmt.Sprintf(`{"listen": "0.0.0.0:%s", "forceListen": true, "dataDir": %s}`, port, dirJSON))
	for _, f := range []string{cfg, wildcard} {
		out, errOut, code := run2(c, "status", "--config", f)
		if code != 0 || !strings.Contains(out, "account:        alice") {
			t.Errorf("status --config %s: exit %d: %s%s", f, code, out, errOut)
		}
	}
	if _, errOut, code := run2(c, "ops", "list", "--config", cfg); code != 0 {
		t.Errorf("ops list --config: exit %d: %s", code, errOut)
	}
	// A token file alone: the address still comes from the file.
	if _, errOut, code := run2(c, "status", "--config", cfg, "--token-file", c.tokenFile); code != 0 {
		t.Errorf("--token-file with --config: exit %d: %s", code, errOut)
	}
	// A flag wins over the file.
	if _, _, code := run2(c, "status", "--config", cfg, "--addr", "127.0.0.1:1"); code != exitUnreachable {
		t.Errorf("--addr over the config file: exit %d, want %d", code, exitUnreachable)
	}
	if _, _, code := run2(c, "status", "--config", cfg, "--data-dir", t.TempDir()); code != exitUnreachable {
		t.Errorf("--data-dir without a token over the config file: exit %d, want %d", code, exitUnreachable)
	}
	// A config file syncd would refuse is refused here too, by name, even
	// when flags name everything it would give.
	for name, f := range map[string]string{
		"unknown key":  writeConfig(`{"listn": "127.0.0.1:7419"}`),
		"missing file": filepath.Join(t.TempDir(), "none.json"),
	} {
		for _, args := range [][]string{
			{"status", "--config", f},
			{"status", "--config", f, "--addr", c.Addr, "--token-file", c.tokenFile},
			{"compact", "--config", f, "--data-dir", dataDir},
		} {
			if _, errOut, code := run2(c, args...); code != exitUsage || !strings.Contains(errOut, f) {
				t.Errorf("%s: %v: exit %d, want %d; stderr %q does not name the file", name, args[:1], code, exitUsage, errOut)
			}
		}
	}

	// compact reads dataDir from the same file.
	st, err := queue.Open(filepath.Join(dataDir, "syncd.db"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, errOut, code := run2(c, "compact", "--config", cfg)
	if code != 0 || !strings.Contains(out, filepath.Join(dataDir, "syncd.db")) {
		t.Errorf("compact --config: exit %d: %s%s", code, out, errOut)
	}
}

// clearEnv unsets the variables the client commands read, for this test.
func clearEnv(t *testing.T) {
	for _, name := range []string{"SYNCD_CONFIG", "SYNCD_ADDR", "SYNCD_LISTEN", "SYNCD_DATA_DIR", "SYNCD_SOCKET"} {
		t.Setenv(name, "")
	}
}

// SYNCD_CONFIG names the file as --config does; SYNCD_ADDR, the address
// to dial, wins over the file's listen address.
func TestCLIConfigEnv(t *testing.T) {
	clearEnv(t)
	c := startCLI(t, localapitest.Options{Account: "alice"})
	dataDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dataDir, "api-token"), []byte(localapitest.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "syncd.json")
	dirJSON, _ := json.Marshal(dataDir)
	if err := os.WriteFile(f, []byte(fmt.Sprintf(`{"listen": %q, "dataDir": %s}`, c.Addr, dirJSON)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SYNCD_CONFIG", f)
	if out, errOut, code := run2(c, "status"); code != 0 || !strings.Contains(out, "alice") {
		t.Errorf("status with SYNCD_CONFIG: exit %d: %s%s", code, out, errOut)
	}
	t.Setenv("SYNCD_ADDR", "127.0.0.1:1")
	if _, _, code := run2(c, "status"); code != exitUnreachable {
		t.Errorf("SYNCD_ADDR over the config file: exit %d, want %d", code, exitUnreachable)
	}
}

func TestDialAddr(t *testing.T) {
	for listen, want := range map[string]string{
		"127.0.0.1:7419": "127.0.0.1:7419",
		"localhost:7419": "localhost:7419",
		"[::1]:7419":     "[::1]:7419",
		"0.0.0.0:7419":   "127.0.0.1:7419",
		":7419":          "127.0.0.1:7419",
		"[::]:7419":      "[::1]:7419",
		"10.0.0.5:7419":  "10.0.0.5:7419",
	} {
		if got := dialAddr(listen); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", listen, got, want)
		}
	}
}

// syncd bench runs a real daemon per row in a scratch directory, prints
// one row per client count, and removes the directory.
func TestBench(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := run([]string{"bench", "--ops", "30", "--clients", "1,4", "--concurrency", "2", "--dir", dir}, &out, &errOut); err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "2 sends at once") {
		t.Errorf("the header does not say --concurrency 2:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(strings.TrimSpace(lines[2]), "clients  creates/s") {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, n := range []string{"1", "4"} {
		f := strings.Fields(lines[3+i])
		if len(f) != 6 || f[0] != n {
			t.Fatalf("row %d: %q", i, lines[3+i])
		}
		for _, num := range []string{f[1], f[5]} {
			if v, err := strconv.ParseFloat(num, 64); err != nil || v <= 0 {
				t.Errorf("row %d: rate %q", i, num)
			}
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("scratch data left in %s: %v", dir, left)
	}
	for _, args := range [][]string{{"bench", "--clients", "0"}, {"bench", "--clients", "x"}, {"bench", "--ops", "0"}, {"bench", "--ops", "1000001"}, {"bench", "--concurrency", "0"}, {"bench", "--concurrency", "257"}} {
		if err := run(args, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// A queue.totals line shows the signed-in account's counts, as syncd
// status does, and counts what other accounts left unsent.
func TestEventLineTotals(t *testing.T) {
	line := func(data string) string {
		return eventLine(client.Event{Seq: 9, Type: "queue.totals", Data: json.RawMessage(data)})
	}
	all := `"counts":{"pending":3,"permanent_failed":1,"done":5}`
	if got := line(`{` + all + `}`); !strings.Contains(got, "pending 3, sending 0, retry_waiting 0, permanent_failed 1, done 5") || strings.Contains(got, "account=") {
		t.Errorf("signed out: %q", got)
	}
	got := line(`{` + all + `,"accountId":"bob","accountCounts":{"pending":1,"done":2}}`)
	for _, want := range []string{"pending 1, sending 0, retry_waiting 0, permanent_failed 0, done 2", "account=bob", "other_accounts_unsent=3"} {
		if !strings.Contains(got, want) {
			t.Errorf("signed in: %q lacks %q", got, want)
		}
	}
}

// A misrouted remote (every create answered 404 by the reference
// server) shows in syncd status as one cause with its fix, not as a list
// of failed operations.
func TestCLIStatusRemoteMisconfigured(t *testing.T) {
	t.Parallel()
	c := startCLI(t, localapitest.Options{Account: "alice", Drain: true, Transport: transport.Config{
		Routes: map[string]transport.Routes{"note": {Create: transport.Route{Path: "/nope/{type}"}}},
	}})
	sub, err := c.Bus.Subscribe(c.Bus.LastSeq(), daemon.Filter{Types: []string{daemon.EventRemoteMisconfigured}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 3 {
		c.write(fmt.Sprintf("n%d", i))
	}
	c.Daemon.Notify()
	if _, ok := sub.Next(); !ok {
		t.Fatalf("no remote.misconfigured event: %v", sub.Err())
	}
	out := c.must("status")
	contains(t, "misconfigured", out, "sending:", "paused (remote_misconfigured)", "misconfigured (route_not_found)",
		"/nope/note was answered 404 Not Found", "fix:", "routes configured for the entity type", "next check:")
	if strings.Contains(out, "needs your attention") {
		t.Errorf("operations failed one by one:\n%s", out)
	}
	var st struct {
		RemoteProblem struct{ Kind, Fix string } `json:"remoteProblem"`
	}
	if err := json.Unmarshal([]byte(c.must("status", "--json")), &st); err != nil || st.RemoteProblem.Kind != "route_not_found" || st.RemoteProblem.Fix == "" {
		t.Errorf("status --json: %+v (%v)", st, err)
	}
}
