package convergence

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// replica is one `syncd server` process. Every replica of a run shares
// its storage: the bbolt directory (one replica) or the PostgreSQL
// database (two replicas).
type replica struct {
	idx  int
	args []string // without --listen
	log  string
	proc *proc
	url  string // http://127.0.0.1:port of the running process
}

func (r *replica) start(t *testing.T) {
	t.Helper()
	args := append([]string{"server", "--listen", "127.0.0.1:0"}, r.args...)
	p, got := startProc(t, t, r.log, args, "syncd server: listening on ")
	r.proc = p
	r.url, _, _ = strings.Cut(got[0], " ")
}

func (r *replica) up() bool { return r.proc != nil && r.proc.alive() }

// device is one `syncd run` daemon with its data directory, reaching its
// server replica through its own cuttable proxy.
type device struct {
	idx     int
	name    string
	dir     string
	log     string
	replica int
	proxy   *cutProxy
	proc    *proc
	url     string // the local API
	token   string
	started bool       // signed in once
	args    []string   // more `syncd run` flags (a scenario's --pull off)
	owner   *testing.T // the test that owns the processes, when started from its subtests
}

func (d *device) up() bool { return d.proc != nil && d.proc.alive() }

func (d *device) start(t *testing.T, account string) {
	t.Helper()
	args := []string{"run", "--data-dir", d.dir, "--listen", "127.0.0.1:0", "--socket", "off",
		"--remote", d.proxy.url(), "--pull", "on"}
	args = append(append(args, daemonDebugArgs()...), d.args...)
	p, got := startProc(t, cmp.Or(d.owner, t), d.log, args, "syncd: listening on ", "syncd: API token in ")
	d.proc = p
	d.url = got[0]
	b, err := os.ReadFile(got[1])
	if err != nil {
		t.Fatal(err)
	}
	d.token = strings.TrimSpace(string(b))
	if !d.started {
		code, m, err := d.call("PUT", "/v1/session", jsonBody(map[string]string{"accountId": account, "accessToken": account + "." + d.name}))
		if err != nil || code != 200 {
			t.Fatalf("%s: session: %d %v %v", d.name, code, m, err)
		}
		d.started = true
	}
}

func (d *device) call(method, path, body string) (int, map[string]any, error) {
	return call(method, d.url+path, d.token, body)
}

// cluster is what one run starts: the replicas and the devices.
type cluster struct {
	t        *testing.T
	dir      string
	account  string
	replicas []*replica
	devices  []*device
}

func newCluster(t *testing.T, cfg config, devices int, account string) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "syncd-convergence-")
	if err != nil {
		t.Fatal(err)
	}
	// Kept when the run fails: the daemons' and servers' logs are there.
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	c := &cluster{t: t, dir: dir, account: account}
	common := []string{"--dev-tokens", "--tombstone-retention", tombstoneRetention.String()}
	common = append(common, policyArgs(t, cfg.policy)...)
	n := 1
	storage := []string{"--data-dir", filepath.Join(c.dir, "server")}
	if cfg.postgres {
		n = 2
		storage = []string{"--postgres", os.Getenv("SYNCD_TEST_POSTGRES_DSN")}
	}
	for i := range n {
		r := &replica{idx: i, args: append(append([]string{}, storage...), common...), log: filepath.Join(c.dir, fmt.Sprintf("server%d.log", i))}
		r.start(t)
		c.replicas = append(c.replicas, r)
	}
	for i := range devices {
		d := &device{idx: i, name: fmt.Sprintf("dev%d", i), replica: i % n,
			dir: filepath.Join(c.dir, fmt.Sprintf("dev%d", i)), log: filepath.Join(c.dir, fmt.Sprintf("dev%d.log", i))}
		d.proxy = newCutProxy(t, strings.TrimPrefix(c.replicas[d.replica].url, "http://"))
		c.devices = append(c.devices, d)
	}
	return c
}

// restartReplica starts replica r again and points its devices' proxies
// at its new port.
func (c *cluster) restartReplica(r *replica) {
	r.start(c.t)
	for _, d := range c.devices {
		if d.replica == r.idx {
			d.proxy.setUpstream(strings.TrimPrefix(r.url, "http://"))
		}
	}
}

// liveReplica is the URL of a running replica, for the checker's reads.
func (c *cluster) liveReplica() string {
	for _, r := range c.replicas {
		if r.up() {
			return r.url
		}
	}
	c.t.Fatal("no server replica runs")
	return ""
}

// feed reads the account's whole feed from a running replica, retrying
// a failed read for a while (a replica may just be starting).
func (c *cluster) feed() (map[string]feedRecord, error) {
	var err error
	for range 20 {
		var recs map[string]feedRecord
		if recs, err = readFeed(c.liveReplica(), c.account+".checker"); err == nil {
			return recs, nil
		}
		time.Sleep(100 * time.Millisecond) // a replica restarting: retry the external read
	}
	return nil, err
}

// serverHelp is `syncd server -h` of the binary under test, read once:
// policyArgs asks it which flags the server has (SYNCD_CONVERGENCE_BIN
// may name a build from before --conflicts).
var (
	helpOnce   sync.Once
	serverHelp string
)

// policyArgs are the `syncd server` flags that make policy the conflict
// policy of every type: --conflicts '*=POLICY'. A server without that
// flag has reject by --reject-conflicts '*' and merge by default (it
// merges since field-level merge landed); lww it cannot give, and the
// test is skipped.
func policyArgs(t *testing.T, policy string) []string {
	t.Helper()
	helpOnce.Do(func() {
		out, _ := exec.Command(syncdBinary(t), "server", "-h").CombinedOutput() // -h exits 2 after the usage
		serverHelp = string(out)
	})
	switch {
	case strings.Contains(serverHelp, "\n  -conflicts "): // not -reject-conflicts
		return []string{"--conflicts", "*=" + policy}
	case policy == policyReject:
		return []string{"--reject-conflicts", "*"}
	case policy == policyMerge:
		return nil
	}
	t.Skipf("this syncd server has no --conflicts flag: policy %s cannot be set", policy)
	return nil
}
