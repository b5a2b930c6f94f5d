package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/syncd/syncd/localapi"
)

// uiCLI runs the syncd binary as a client command and returns its
// stdout, stderr and exit code.
func uiCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := syncdBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// openLink opens a sign-in link as a browser would, and checks that its
// session shows the page and the API; it returns the session cookie.
func openLink(t *testing.T, link string) string {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET %s: %d, Location %q; want 303 to /ui/", link, res.StatusCode, res.Header.Get("Location"))
	}
	var session string
	for _, c := range res.Cookies() {
		if c.Name == localapi.UICookieName {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatal("the link set no session cookie")
	}
	base := link[:strings.Index(link, "/ui/")]
	for _, p := range []string{"/ui/", "/ui/api/v1/status", "/ui/api/v1/status/history"} {
		req, _ := http.NewRequest("GET", base+p, nil)
		req.AddCookie(&http.Cookie{Name: localapi.UICookieName, Value: session})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the session: %d %s", p, res.StatusCode, b)
		}
	}
	return session
}

// `syncd ui --no-open`, against a real syncd found by --data-dir, prints
// a working sign-in link as the last line of stdout; it works once.
func TestUICommandNoOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startRun(t, dir)
	out, errOut, code := uiCLI(t, nil, "ui", "--no-open", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("syncd ui --no-open: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	link := lines[len(lines)-1]
	if !strings.HasPrefix(link, d.url+"/ui/login?code=") {
		t.Fatalf("last line %q, want a link on %s", link, d.url)
	}
	openLink(t, link)
	res, err := http.Get(link) // replayed
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("the link opened twice: %d, want 403", res.StatusCode)
	}
	d.stop(t)
}

// Without --no-open, syncd ui opens the link with the browser: $BROWSER
// here, a script that writes down what it was given.
func TestUICommandOpensBrowser(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in browser is a shell script")
	}
	t.Parallel()
	dir := t.TempDir()
	d := startRun(t, dir)
	got := filepath.Join(t.TempDir(), "opened")
	browser := filepath.Join(t.TempDir(), "browser")
	if err := os.WriteFile(browser, []byte("#!/bin/sh\nprintf '%s' \"$1\" > "+got+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := uiCLI(t, []string{"BROWSER=" + browser}, "ui", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "opened the status page") {
		t.Fatalf("syncd ui: exit %d: %s%s", code, out, errOut)
	}
	if strings.Contains(out, "code=") {
		t.Errorf("the link was printed as well as opened: %s", out)
	}
	link, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(link), d.url+"/ui/login?code=") {
		t.Fatalf("the browser got %q", link)
	}
	openLink(t, string(link))

	// A browser that fails: the link is printed instead. (Not on
	// macOS, where the next command tried, /usr/bin/open, would open a
	// real browser.)
	if runtime.GOOS == "darwin" {
		d.stop(t)
		return
	}
	failing := filepath.Join(t.TempDir(), "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 3\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = uiCLI(t, []string{"BROWSER=" + failing, "PATH=" + t.TempDir()}, "ui", "--data-dir", dir)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if code != 0 || !strings.Contains(errOut, "could not open a browser") || !strings.HasPrefix(lines[len(lines)-1], d.url+"/ui/login?code=") {
		t.Fatalf("failing browser: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	openLink(t, lines[len(lines)-1])
	d.stop(t)
}

// With ui: off, syncd ui says the page is off and how to turn it on;
// the daemon serves nothing under /ui/.
func TestUICommandOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startRun(t, dir, "--ui=off")
	out, errOut, code := uiCLI(t, nil, "ui", "--no-open", "--data-dir", dir)
	if code != exitFailure || out != "" || !strings.Contains(errOut, "turned off (ui: off)") || !strings.Contains(errOut, "restart syncd") {
		t.Errorf("ui off: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	res, err := http.Get(d.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/ with ui off: %d", res.StatusCode)
	}
	d.stop(t)
}

func TestUICommandUsage(t *testing.T) {
	t.Parallel()
	_, errOut, code := cli(t, "ui", "extra")
	if code != exitUsage || !strings.Contains(errOut, "unexpected argument") {
		t.Errorf("ui extra: exit %d: %s", code, errOut)
	}
	out, _, code := cli(t, "help", "ui")
	if code != 0 || !strings.Contains(out, "--no-open") || !strings.Contains(out, "--data-dir") {
		t.Errorf("help ui: exit %d: %s", code, out)
	}
}

// The browser commands per OS, $BROWSER first.
func TestBrowserCommands(t *testing.T) {
	t.Parallel()
	const u = "http://127.0.0.1:7419/ui/login?code=x"
	none := func(string) string { return "" }
	for goos, want := range map[string][]string{
		"linux":   {"xdg-open", u},
		"freebsd": {"xdg-open", u},
		"darwin":  {"/usr/bin/open", u},
		"windows": {"rundll32", "url.dll,FileProtocolHandler", u},
	} {
		got := browserCommands(u, goos, none)
		if len(got) != 1 || !slices.Equal(got[0], want) {
			t.Errorf("%s: %q, want %q", goos, got, want)
		}
	}
	got := browserCommands(u, "linux", func(k string) string {
		if k == "BROWSER" {
			return "/opt/firefox"
		}
		return ""
	})
	if len(got) != 2 || !slices.Equal(got[0], []string{"/opt/firefox", u}) {
		t.Errorf("with $BROWSER: %q", got)
	}
}
