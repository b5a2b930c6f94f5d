package daemon

// The child half of the crash and soak tests: the test binary re-executed
// with childEnv set runs a daemon (or a reference server) over a data
// directory and dies by SIGKILL at a named failpoint or when its parent
// kills it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/remote"
	"github.com/syncd/syncd/transport"
)

const (
	childEnv       = "SYNCD_DAEMON_CHILD" // daemon, remote or soak
	childDirEnv    = "SYNCD_CHILD_DIR"
	childRemoteEnv = "SYNCD_CHILD_REMOTE"
	// childFailpointEnv names where the child SIGKILLs itself:
	// after-claim (an op just turned sending), after-response (an answer
	// arrived, not yet recorded), kill-after-reserve (remote: a
	// reservation is made, not committed).
	childFailpointEnv = "SYNCD_CHILD_FAILPOINT"
	// childBatchEnv sets the child daemon's Config.Batch (default off).
	childBatchEnv = "SYNCD_CHILD_BATCH"
	childSoakEnv  = "SYNCD_CHILD_SOAK" // writers,entities
	// childPostgresEnv puts the child remote on PostgreSQL (a DSN)
	// instead of a bbolt file in the child's directory.
	childPostgresEnv = "SYNCD_CHILD_POSTGRES"
)

// out serialises the child's report lines.
var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

func say(format string, args ...any) {
	out.Lock()
	fmt.Fprintf(out.w, format+"\n", args...)
	out.w.Flush()
	out.Unlock()
}

// die kills the process at once, as SIGKILL does (os.Process.Kill is
// SIGKILL on unix, TerminateProcess on Windows).
func die() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Kill()
	}
	select {}
}

func runChild() bool {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return false
	}
	var err error
	switch mode {
	case "remote":
		err = childRemote()
	case "daemon", "soak":
		err = childDaemon(mode)
	default:
		err = fmt.Errorf("unknown child mode %q", mode)
	}
	if err != nil {
		say("error %v", err)
		os.Exit(3)
	}
	return true
}

// childRemote serves the reference server on loopback until killed.
func childRemote() error {
	cfg := remote.Config{DataDir: os.Getenv(childDirEnv), DevTokens: true}
	if dsn := os.Getenv(childPostgresEnv); dsn != "" {
		cfg.DataDir, cfg.PostgresDSN = "", dsn
	}
	if os.Getenv(childFailpointEnv) == "kill-after-reserve" {
		cfg.TestHookAfterReserve = func(context.Context) {
			say("failpoint kill-after-reserve")
			die()
		}
	}
	srv, err := remote.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	say("listening http://%s", ln.Addr())
	return srv.Run(context.Background(), ln)
}

// childDaemon runs a daemon over the data directory against the remote
// until killed; in soak mode it also runs the writers' script and exits
// once everything is written and drained.
func childDaemon(mode string) error {
	store, err := queue.Open(filepath.Join(os.Getenv(childDirEnv), "syncd.db"), queue.Config{OnCommit: commits.add})
	if err != nil {
		return err
	}
	client, err := transport.New(transport.Config{BaseURL: os.Getenv(childRemoteEnv), Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	cfg := Config{
		Store:     store,
		Transport: client,
		Logger:    slog.New(slog.DiscardHandler),
		Lease:     15 * time.Second,
		Policy:    transport.Policy{Backoff: transport.Backoff{Base: 20 * time.Millisecond, Max: 300 * time.Millisecond}},
		// The crash rows count the requests of sends; a pull's would be
		// among them (the pull's own crash test is in cmd/syncd).
		Pull: PullOff,
		// One request per operation, as the crash rows expect, unless
		// the rig asks for batches.
		Batch: BatchMode(os.Getenv(childBatchEnv)),
	}
	if cfg.Batch == "" {
		cfg.Batch = BatchOff
	}
	switch fp := os.Getenv(childFailpointEnv); fp {
	case "":
	case "after-claim":
		cfg.TestHookAfterClaim = func(op queue.Operation) {
			say("failpoint after-claim %s", op.ID)
			die()
		}
	case "after-response":
		cfg.TestHookAfterResponse = func(op queue.Operation, o transport.Outcome) {
			say("failpoint after-response %s %d", op.ID, o.Status)
			die()
		}
	default:
		return fmt.Errorf("unknown failpoint %q", fp)
	}
	d, err := New(cfg)
	if err != nil {
		return err
	}
	if acct, ok := d.Account(); !ok || acct != "alice" {
		if err := d.SetSession(context.Background(), "alice", "alice.1"); err != nil {
			return err
		}
	}
	if err := d.Start(context.Background()); err != nil {
		return err
	}
	say("ready")
	if mode != "soak" {
		select {}
	}
	var w, n int
	if _, err := fmt.Sscanf(os.Getenv(childSoakEnv), "%d,%d", &w, &n); err != nil {
		return fmt.Errorf("%s: %v", childSoakEnv, err)
	}
	if err := soakWrite(store, d, w, n); err != nil {
		return err
	}
	say("written")
	for {
		ch := commits.wait()
		st, err := store.Stats()
		if err != nil {
			return err
		}
		if unfinished(st) == 0 {
			break
		}
		if f := st.Counts[queue.StatePermanentFailed]; f > 0 {
			return fmt.Errorf("%d operations failed permanently", f)
		}
		<-ch
	}
	d.Stop(context.Background())
	store.Close()
	say("drained")
	return nil
}

func unfinished(st queue.Stats) int {
	return st.Counts[queue.StatePending] + st.Counts[queue.StateSending] + st.Counts[queue.StateRetryWaiting] + st.Counts[queue.StatePermanentFailed]
}

// commits signals every commit of the child's store.
var commits = &signal{ch: make(chan struct{})}

type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) add([]queue.Event) {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// soakStep is one write of a soak writer's script.
type soakStep struct {
	write queue.Write
}

// soakScript is writer w's deterministic script over n entities: create
// each, update it twice, delete every third. Its operation ids are fixed,
// so a restarted writer replays the steps already written (the queue
// answers them as replays) and goes on from where it died.
func soakScript(w, n int) []queue.Write {
	var s []queue.Write
	id := func(i int) string { return fmt.Sprintf("w%d-e%d", w, i) }
	add := func(op queue.OpType, i int, kind, data string) {
		key := fmt.Sprintf("soak-%s-%s", id(i), kind)
		s = append(s, queue.Write{
			Op: op, AccountID: "alice", EntityType: "note", EntityID: id(i),
			Data: json.RawMessage(data), OperationID: key, RequestFingerprint: key,
		})
	}
	for i := 0; i < n+3; i++ {
		if i < n {
			add(queue.OpCreate, i, "c", fmt.Sprintf(`{"w":%d,"i":%d,"v":0}`, w, i))
		}
		if j := i - 1; j >= 0 && j < n {
			add(queue.OpUpdate, j, "u1", `{"v":1}`)
		}
		if j := i - 2; j >= 0 && j < n {
			add(queue.OpUpdate, j, "u2", `{"v":2}`)
		}
		if j := i - 3; j >= 0 && j < n && j%3 == 0 {
			add(queue.OpDelete, j, "d", "")
		}
	}
	return s
}

// soakFinal is an entity's final state after the script.
func soakFinal(w, i int) (data string, deleted bool) {
	return fmt.Sprintf(`{"i":%d,"v":2,"w":%d}`, i, w), i%3 == 0
}

func soakWrite(store *queue.Store, d *Daemon, writers, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	var acked sync.Mutex
	count := 0
	for w := range writers {
		wg.Go(func() {
			for _, wr := range soakScript(w, n) {
				if _, err := store.Apply(context.Background(), wr); err != nil {
					errs <- fmt.Errorf("writer %d: %s: %w", w, wr.OperationID, err)
					return
				}
				d.Notify()
				acked.Lock()
				count++
				if count%25 == 0 {
					say("acked %d", count)
				}
				acked.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{}
	err    error
}

// startChild re-executes the test binary as a child with env.
func startChild(t testing.TB, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// expect waits for a line starting with prefix and returns it; lines
// before it are dropped. It fails on an "error" line or exit.
func (c *child) expect(t testing.TB, prefix string) string {
	t.Helper()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				<-c.exited
				t.Fatalf("child exited (%v) before %q", c.err, prefix)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("child: %s", line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout.C:
			t.Fatalf("timed out waiting for the child to say %q", prefix)
		}
	}
}

// died waits until the child has exited and reports whether SIGKILL
// ended it.
func (c *child) died(t testing.TB) bool {
	t.Helper()
	for range c.lines {
	}
	<-c.exited
	if ee, ok := c.err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	return false
}

// kill SIGKILLs the child and waits for it.
func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	for range c.lines {
	}
	<-c.exited
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
