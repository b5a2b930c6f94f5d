package convergence

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The syncd binary is built once per test binary, without -race: the
// daemons and servers are separate processes, and a race build would
// make each several times slower on a 2-core machine. SYNCD_CONVERGENCE_BIN
// names a prebuilt binary instead (to check another commit's daemon).
var (
	binOnce sync.Once
	binPath string
	binDir  string
	binErr  error
)

// TestMain removes the binary built for the tests after the last one.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func syncdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("SYNCD_CONVERGENCE_BIN"); p != "" {
			binPath = p
			return
		}
		binDir, binErr = os.MkdirTemp("", "syncd-convergence-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "syncd")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		cmd := exec.Command(goTool, "build", "-o", binPath, "github.com/syncd/syncd/cmd/syncd")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one running syncd process (a daemon or a server replica). Its
// stdout and stderr go to logPath (appended across restarts); the lines
// the harness waits for are handed over as they come.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	lines  chan string
	log    *os.File
}

// lineTap is the process's stdout and stderr: it copies everything to
// the log file and hands every complete stdout line to lines (dropping
// them once nobody listens: only the first few matter).
type lineTap struct {
	mu    sync.Mutex
	f     *os.File
	buf   []byte
	lines chan string
	tag   string
}

func (w *lineTap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Write(p)
	if w.lines == nil {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		select {
		case w.lines <- line:
		default:
		}
	}
	return len(p), nil
}

// startProc starts bin with args, logging to logPath, and waits until a
// stdout line starts with each of wantPrefixes; it returns the rest of
// each such line, in order. The process is killed when owner ends (t,
// or the test that owns the cluster when t is one of its subtests).
func startProc(t, owner *testing.T, logPath string, args []string, wantPrefixes ...string) (*proc, []string) {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	p := &proc{exited: make(chan struct{}), lines: make(chan string, 64), log: f}
	p.cmd = exec.Command(syncdBinary(t), args...)
	p.cmd.Stdout = &lineTap{f: f, lines: p.lines}
	p.cmd.Stderr = &lineTap{f: f}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	owner.Cleanup(func() { p.kill() })
	got := make([]string, len(wantPrefixes))
	deadline := time.After(30 * time.Second)
	for i := 0; i < len(wantPrefixes); {
		select {
		case line := <-p.lines:
			for j, pre := range wantPrefixes {
				if rest, ok := strings.CutPrefix(line, pre); ok && got[j] == "" {
					got[j] = rest
					i++
				}
			}
		case <-p.exited:
			t.Fatalf("%s exited at start (%v); log %s:\n%s", args[0], p.cmd.ProcessState, logPath, tail(logPath, 30))
		case <-deadline:
			p.kill()
			t.Fatalf("%s: no %q line in 30s; log %s:\n%s", args[0], wantPrefixes, logPath, tail(logPath, 30))
		}
	}
	return p, got
}

// kill SIGKILLs the process and waits for it; safe twice.
func (p *proc) kill() {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	p.log.Close()
}

// stop sends SIGTERM and waits up to 30 s, then SIGKILLs.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return errors.New("already exited")
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		p.log.Close()
		return nil
	case <-time.After(30 * time.Second):
		p.kill()
		return errors.New("still running 30s after SIGTERM")
	}
}

// alive reports whether the process still runs.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
