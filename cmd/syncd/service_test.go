package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/service"
)

// svcRun runs the syncd binary and returns its output and exit code.
func svcRun(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("syncd %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), code
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestServiceStatusNotInstalled(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("syncd-test-%08x", rand.Uint32())
	out, errOut, code := svcRun(t, "service", "status", "--service-name", name)
	if code != exitServiceNotInstalled || strings.TrimSpace(out) != "not installed" {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want 4 and \"not installed\"", code, out, errOut)
	}
	if _, errOut, code := svcRun(t, "service", "stop", "--service-name", name); code == 0 || !strings.Contains(errOut, "not installed") && !strings.Contains(errOut, "needs root") {
		t.Errorf("stop of a service not installed: exit %d, stderr %q", code, errOut)
	}
	if _, _, code := svcRun(t, "service", "status", "--service-name", "../x"); code != 2 {
		t.Errorf("bad service name: exit %d, want 2", code)
	}
}

func TestServiceUserOnSysV(t *testing.T) {
	t.Parallel()
	m, err := service.New(service.Config{Name: "syncd-test-user", User: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Platform() != service.PlatformSysV {
		t.Skipf("the service manager here is %s, not SysV", m.Platform())
	}
	_, errOut, code := svcRun(t, "service", "install", "--user", "--service-name", "syncd-test-user", "--data-dir", t.TempDir())
	if code == 0 || !strings.Contains(errOut, "not supported here") {
		t.Errorf("install --user on SysV: exit %d, stderr %q", code, errOut)
	}
}

// TestServiceRoot installs syncd as a real service on this machine,
// under a name of its own, and takes it through its life: start, reach
// the local API, write, stop, check the disk, restart, uninstall, check
// that nothing is left behind.
func TestServiceRoot(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the service test runs on Linux (SysV init or systemd)")
	}
	if os.Geteuid() != 0 {
		t.Skip("installing a system service needs root: run this test as root (CI does)")
	}
	name := fmt.Sprintf("syncd-test-%08x", rand.Uint32())
	m, err := service.New(service.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("service manager: %s, service name: %s", m.Platform(), name)
	if m.Platform() != service.PlatformSysV && m.Platform() != service.PlatformSystemd {
		t.Skipf("service manager %s: this test knows the files of SysV and systemd only", m.Platform())
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	t.Cleanup(func() {
		// Whatever happened, take the service away.
		if st, _ := m.Status(); st != service.NotInstalled {
			t.Logf("cleanup: uninstalling %s (%v)", name, st)
			m.Uninstall()
		}
	})

	out, errOut, code := svcRun(t, "service", "install", "--service-name", name, "--data-dir", dataDir, "--listen", addr)
	if code != 0 {
		t.Fatalf("install: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	t.Logf("install:\n%s", out)
	if !strings.Contains(out, name+": running") {
		t.Errorf("install did not report it running:\n%s", out)
	}
	if note := systemTokenNote(runtime.GOOS, false, dataDir); !strings.Contains(errOut, note) {
		t.Errorf("install did not say that the token is root's:\n%s", errOut)
	}
	if out, _, code := svcRun(t, "service", "status", "--service-name", name); code != 0 || strings.TrimSpace(out) != "running" {
		t.Fatalf("status after install: exit %d, %q", code, out)
	}

	// The local API answers with the token from the data directory.
	api := svcWaitAPI(t, dataDir, addr, name)
	if st, m := api.call(t, "GET", "/v1/status", ""); st != 200 {
		t.Fatalf("status: %d %v", st, m)
	}
	if st, m := api.call(t, "PUT", "/v1/session", `{"accountId":"alice","accessToken":"alice.t"}`); st != 200 {
		t.Fatalf("session: %d %v", st, m)
	}
	st, created := api.call(t, "POST", "/v1/entities/note", `{"id":"n1","data":{"title":"from the service test"}}`)
	if st != 201 {
		t.Fatalf("create: %d %v", st, created)
	}
	opID, _ := created["operationId"].(string)

	out, errOut, code = svcRun(t, "service", "stop", "--service-name", name)
	if code != 0 {
		t.Fatalf("stop: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := svcRun(t, "service", "status", "--service-name", name); code != exitServiceStopped || strings.TrimSpace(out) != "stopped" {
		t.Fatalf("status after stop: exit %d, %q; want 3, stopped", code, out)
	}

	// The entity and its operation are on disk, the file consistent.
	store, err := queue.Open(filepath.Join(dataDir, dataFileName), queue.Config{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open the data file after stop: %v", err)
	}
	e, err := store.GetEntity("alice", "note", "n1")
	if err != nil {
		t.Errorf("entity after stop: %v", err)
	} else if !strings.Contains(string(e.Data), "from the service test") {
		t.Errorf("entity data %s", e.Data)
	}
	op, err := store.GetOperation(opID)
	if err != nil {
		t.Errorf("operation %s after stop: %v", opID, err)
	} else if op.EntityID != "n1" || op.State == queue.StateSending {
		t.Errorf("operation after stop: %+v", op)
	}
	if err := store.Check(); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart: it comes back with the entity.
	if out, errOut, code := svcRun(t, "service", "restart", "--service-name", name); code != 0 {
		t.Fatalf("restart: exit %d\n%s%s", code, out, errOut)
	}
	api = svcWaitAPI(t, dataDir, addr, name)
	if st, m := api.call(t, "GET", "/v1/entities/note/n1", ""); st != 200 {
		t.Errorf("entity after restart: %d %v", st, m)
	}

	out, errOut, code = svcRun(t, "service", "uninstall", "--service-name", name)
	if code != 0 {
		t.Fatalf("uninstall: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := svcRun(t, "service", "status", "--service-name", name); code != exitServiceNotInstalled {
		t.Errorf("status after uninstall: exit %d, %q; want 4", code, out)
	}
	// The port is free again: the daemon is gone.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still answers after uninstall", addr)
	}
	left := svcFiles(name)
	if len(left) > 0 {
		t.Errorf("left behind after uninstall: %v", left)
	}
	// The data stays.
	if _, err := os.Stat(filepath.Join(dataDir, dataFileName)); err != nil {
		t.Errorf("data file after uninstall: %v", err)
	}
}

// svcFiles lists the files a service NAME may have on this machine.
func svcFiles(name string) []string {
	var found []string
	for _, pattern := range []string{
		"/etc/init.d/" + name,
		"/etc/rc?.d/*" + name,
		"/var/run/" + name + ".pid",
		"/run/" + name + ".pid",
		"/var/log/" + name + ".*",
		"/etc/systemd/system/" + name + ".service",
		"/etc/systemd/system/*.wants/" + name + ".service",
	} {
		m, _ := filepath.Glob(pattern)
		found = append(found, m...)
	}
	return found
}

// svcWaitAPI waits until the service's local API answers, or fails the
// test with the service's log.
func svcWaitAPI(t *testing.T, dataDir, addr, name string) *daemonProc {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		tok, err := os.ReadFile(filepath.Join(dataDir, "api-token"))
		if err == nil {
			p := &daemonProc{url: "http://" + addr, token: strings.TrimSpace(string(tok))}
			req, _ := http.NewRequest("GET", p.url+"/v1/status", nil)
			req.Header.Set("Authorization", "Bearer "+p.token)
			res, err := (&http.Client{Timeout: time.Second}).Do(req)
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == 200 {
					return p
				}
			}
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile("/var/log/" + name + ".err")
			outLog, _ := os.ReadFile("/var/log/" + name + ".log")
			t.Fatalf("the service's API at %s did not answer in 15s\nstdout log:\n%s\nstderr log:\n%s", addr, outLog, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRunSecondInstance: a second syncd on the same data directory
// exits at once with a clear message instead of waiting for the lock.
func TestRunSecondInstance(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	first := startRun(t, dataDir)
	start := time.Now()
	_, errOut, code := svcRun(t, "run", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--lock-timeout", "200ms")
	took := time.Since(start)
	if code == 0 {
		t.Fatal("the second syncd succeeded")
	}
	want := "syncd: another syncd is already running on " + dataDir
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q, want it to contain %q", errOut, want)
	}
	if took > 10*time.Second {
		t.Errorf("the second syncd took %s to give up", took)
	}
	first.stop(t)
}

// TestRunPrintConfig: --print-config shows the effective settings,
// never the API token or the remote's credentials.
func TestRunPrintConfig(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	const token = "tok-not-to-be-printed"
	if err := os.WriteFile(filepath.Join(dataDir, "api-token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "syncd.json")
	if err := os.WriteFile(conf, []byte(`{"concurrency": 7, "logLevel": "debug"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", conf, "--data-dir", dataDir, "--remote", "https://api.example.com", "--log-level", "warn", "--print-config")
	cmd.Env = append(os.Environ(), "SYNCD_CONCURRENCY=8", "SYNCD_REQUEST_TIMEOUT=3s")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got["concurrency"] != 8.0 || got["logLevel"] != "warn" || got["requestTimeout"] != "3s" || got["dataDir"] != dataDir {
		t.Errorf("effective config:\n%s", out)
	}
	for _, secret := range []string{token} {
		if strings.Contains(string(out), secret) {
			t.Errorf("--print-config shows %q:\n%s", secret, out)
		}
	}
}

// A system install on Linux or macOS says that its token is root's and
// points desktops to --user; a user install and Windows say nothing.
func TestSystemTokenNote(t *testing.T) {
	for _, tt := range []struct {
		goos string
		user bool
		want bool
	}{
		{"linux", false, true}, {"darwin", false, true}, {"linux", true, false}, {"darwin", true, false}, {"windows", false, false},
	} {
		note := systemTokenNote(tt.goos, tt.user, "/var/lib/syncd")
		if got := strings.Contains(note, "/var/lib/syncd/api-token") && strings.Contains(note, "syncd service install --user"); got != tt.want {
			t.Errorf("%s user=%v: %q", tt.goos, tt.user, note)
		}
	}
}
