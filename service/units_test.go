package service_test

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/service"
)

// unitLines is a unit file's settings, KEY → values in order.
func unitLines(t *testing.T, unit string) map[string][]string {
	t.Helper()
	m := map[string][]string{}
	section := ""
	for line := range strings.Lines(unit) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("line %q is no KEY=VALUE", line)
			}
			m[section+"."+k] = append(m[section+"."+k], v)
		}
	}
	return m
}

func testUnit(user bool) service.Unit {
	return service.Unit{
		Name: "syncd-test", Description: service.DefaultDescription, User: user,
		Executable: "/usr/local/bin/syncd", Arguments: []string{"run", "--data-dir=/var/lib/syncd-test"},
		WritablePaths: []string{"/var/lib/syncd-test"},
	}
}

func TestSystemdUserUnit(t *testing.T) {
	t.Parallel()
	unit, err := service.SystemdUnit(testUnit(true))
	if err != nil {
		t.Fatal(err)
	}
	m := unitLines(t, unit)
	// A user manager reaches default.target at login; it has no
	// multi-user.target (issue 30: the unit never started).
	if got := m["Install.WantedBy"]; !slices.Equal(got, []string{"default.target"}) {
		t.Errorf("WantedBy = %q, want default.target", got)
	}
	if strings.Contains(unit, "network-online") || strings.Contains(unit, "multi-user") {
		t.Errorf("a user unit names a system target:\n%s", unit)
	}
	checkRestart(t, m)
	// The sandbox of a system unit needs user namespaces in a user
	// manager: the user unit keeps to what works everywhere.
	if _, ok := m["Service.ProtectSystem"]; ok {
		t.Errorf("user unit has ProtectSystem:\n%s", unit)
	}
	if got := m["Service.NoNewPrivileges"]; !slices.Equal(got, []string{"yes"}) {
		t.Errorf("NoNewPrivileges = %q", got)
	}
}

func TestSystemdSystemUnit(t *testing.T) {
	t.Parallel()
	unit, err := service.SystemdUnit(testUnit(false))
	if err != nil {
		t.Fatal(err)
	}
	m := unitLines(t, unit)
	want := map[string][]string{
		"Install.WantedBy":        {"multi-user.target"},
		"Service.ExecStart":       {"/usr/local/bin/syncd run --data-dir=/var/lib/syncd-test"},
		"Service.ProtectSystem":   {"strict"},
		"Service.ReadWritePaths":  {"/var/lib/syncd-test"},
		"Service.ProtectHome":     {"yes"},
		"Service.NoNewPrivileges": {"yes"},
		"Service.PrivateTmp":      {"yes"},
		"Service.PrivateDevices":  {"yes"},
		"Service.UMask":           {"0077"},
		// A filtered system call fails rather than kills syncd.
		"Service.SystemCallErrorNumber": {"EPERM"},
		"Service.CapabilityBoundingSet": {""},
	}
	for k, v := range want {
		if !slices.Equal(m[k], v) {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	checkRestart(t, m)
}

// checkRestart: restarted within seconds, not in a tight loop forever.
func checkRestart(t *testing.T, m map[string][]string) {
	t.Helper()
	if got := m["Service.Restart"]; !slices.Equal(got, []string{"always"}) {
		t.Errorf("Restart = %q, want always", got)
	}
	sec, err := strconv.Atoi(strings.Join(m["Service.RestartSec"], ""))
	if err != nil || sec < 1 || sec > 5 {
		t.Errorf("RestartSec = %q, want 1 to 5 seconds", m["Service.RestartSec"])
	}
	if len(m["Unit.StartLimitBurst"]) != 1 || len(m["Unit.StartLimitIntervalSec"]) != 1 {
		t.Errorf("no start limit in [Unit]: %q %q", m["Unit.StartLimitBurst"], m["Unit.StartLimitIntervalSec"])
	}
}

func TestSystemdUnitHomeDataDir(t *testing.T) {
	t.Parallel()
	u := testUnit(false)
	u.WritablePaths = []string{"/home/ann/syncd"}
	unit, err := service.SystemdUnit(u)
	if err != nil {
		t.Fatal(err)
	}
	m := unitLines(t, unit)
	if got := m["Service.ProtectHome"]; !slices.Equal(got, []string{"read-only"}) {
		t.Errorf("data under /home: ProtectHome = %q, want read-only", got)
	}
}

func TestSystemdQuoting(t *testing.T) {
	t.Parallel()
	u := testUnit(false)
	u.Executable = "/opt/my apps/syncd"
	u.Arguments = []string{"run", "--remote=https://x/a%20b", `--data-dir=/srv/a "b"`, "--x=$HOME", `a\b`}
	u.WritablePaths = []string{"/srv/a \"b\""}
	unit, err := service.SystemdUnit(u)
	if err != nil {
		t.Fatal(err)
	}
	m := unitLines(t, unit)
	want := `"/opt/my apps/syncd" run --remote=https://x/a%%20b "--data-dir=/srv/a \"b\"" "--x=$$HOME" "a\\b"`
	if got := strings.Join(m["Service.ExecStart"], ""); got != want {
		t.Errorf("ExecStart =\n%s\nwant\n%s", got, want)
	}
	if got := strings.Join(m["Service.ReadWritePaths"], ""); got != `"/srv/a \"b\""` {
		t.Errorf("ReadWritePaths = %s", got)
	}
}

func TestUnitRefuses(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--x={{.Name}}", "a\nb", "a\x00b"} {
		u := testUnit(false)
		u.Arguments = append(u.Arguments, arg)
		if _, err := service.SystemdUnit(u); !errors.Is(err, service.ErrBadArgument) {
			t.Errorf("%q: systemd err = %v, want ErrBadArgument", arg, err)
		}
		if _, err := service.LaunchdPlist(u); !errors.Is(err, service.ErrBadArgument) {
			t.Errorf("%q: launchd err = %v, want ErrBadArgument", arg, err)
		}
	}
	u := testUnit(false)
	u.WritablePaths = []string{"relative/dir"}
	if _, err := service.SystemdUnit(u); !errors.Is(err, service.ErrBadArgument) {
		t.Errorf("relative writable path: err = %v", err)
	}
}

// writeUnit writes unit as NAME.service in a new directory, with
// ExecStart's program an existing executable (verify checks it).
func writeUnit(t *testing.T, user bool) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	u := testUnit(user)
	u.Executable = exe
	unit, err := service.SystemdUnit(u)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), u.Name+".service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here; the unit's content is tested by TestSystemdSystemUnit")
	}
	return p
}

// TestSystemdUnitVerify: systemd's own parser finds nothing wrong with
// either unit (unknown settings, bad values, misplaced sections).
func TestSystemdUnitVerify(t *testing.T) {
	t.Parallel()
	sa := systemdAnalyze(t)
	for _, user := range []bool{false, true} {
		path := writeUnit(t, user)
		out, err := exec.Command(sa, "verify", "--man=no", path).CombinedOutput()
		// verify also reports on the units it pulls in from this
		// machine; only lines about ours count.
		var ours []string
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, filepath.Base(path)) {
				ours = append(ours, line)
			}
		}
		if len(ours) > 0 || (err != nil && len(out) == 0) {
			t.Errorf("user=%v: systemd-analyze verify: %v\n%s", user, err, out)
		}
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)

// TestSystemdUnitSecurity: `systemd-analyze security` rates the system
// unit at most 5.0 (issue 30: 9.6 UNSAFE before hardening).
func TestSystemdUnitSecurity(t *testing.T) {
	t.Parallel()
	sa := systemdAnalyze(t)
	path := writeUnit(t, false)
	out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", path).CombinedOutput()
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		if strings.Contains(string(out), "--offline") || strings.Contains(string(out), "unrecognized option") {
			t.Skipf("this systemd-analyze cannot rate a unit file offline: %s", out)
		}
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("exposure %.1f", score)
	if score > 5.0 {
		t.Errorf("exposure %.1f, want at most 5.0:\n%s", score, out)
	}
}

// plist is a launchd property list's top dict, read generically.
type plistDict struct {
	Items []plistItem `xml:",any"`
}

type plistItem struct {
	XMLName xml.Name
	Text    string      `xml:",chardata"`
	Items   []plistItem `xml:",any"`
}

func parsePlist(t *testing.T, s string) map[string]plistItem {
	t.Helper()
	var doc struct {
		Dict plistDict `xml:"dict"`
	}
	d := xml.NewDecoder(strings.NewReader(s))
	d.Entity = xml.HTMLEntity
	d.Strict = true
	if err := d.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("plist: %v\n%s", err, s)
	}
	m := map[string]plistItem{}
	items := doc.Dict.Items
	for i := 0; i+1 < len(items); i += 2 {
		if items[i].XMLName.Local != "key" {
			t.Fatalf("plist: %s where a key belongs", items[i].XMLName.Local)
		}
		m[items[i].Text] = items[i+1]
	}
	return m
}

func TestLaunchdPlist(t *testing.T) {
	t.Parallel()
	u := testUnit(true)
	u.Arguments = []string{"run", "--data-dir=/Users/a/Library/Application Support/syncd", "--remote=https://x/?a=1&b=<2>"}
	u.LogDirectory = "/Users/a/Library/Logs"
	s, err := service.LaunchdPlist(u)
	if err != nil {
		t.Fatal(err)
	}
	m := parsePlist(t, s)
	if m["Label"].Text != "syncd-test" {
		t.Errorf("Label = %q", m["Label"].Text)
	}
	var args []string
	for _, it := range m["ProgramArguments"].Items {
		args = append(args, it.Text)
	}
	if want := append([]string{u.Executable}, u.Arguments...); !slices.Equal(args, want) {
		t.Errorf("ProgramArguments = %q, want %q", args, want)
	}
	for _, k := range []string{"RunAtLoad", "KeepAlive"} {
		if m[k].XMLName.Local != "true" {
			t.Errorf("%s = <%s/>, want <true/>", k, m[k].XMLName.Local)
		}
	}
	if n, _ := strconv.Atoi(m["ThrottleInterval"].Text); n < 1 || n > 5 {
		t.Errorf("ThrottleInterval = %q, want 1 to 5 seconds", m["ThrottleInterval"].Text)
	}
	if n, _ := strconv.Atoi(m["ExitTimeOut"].Text); time.Duration(n)*time.Second <= service.DefaultStopTimeout {
		t.Errorf("ExitTimeOut = %q, want above Run's stop timeout %s", m["ExitTimeOut"].Text, service.DefaultStopTimeout)
	}
	if got := m["StandardErrorPath"].Text; got != "/Users/a/Library/Logs/syncd-test.err.log" {
		t.Errorf("StandardErrorPath = %q", got)
	}
	if p, err := exec.LookPath("plutil"); err == nil {
		path := filepath.Join(t.TempDir(), "syncd-test.plist")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(p, "-lint", path).CombinedOutput(); err != nil {
			t.Errorf("plutil -lint: %v\n%s", err, out)
		}
	}
}

func TestWindowsOptions(t *testing.T) {
	t.Parallel()
	o := service.WindowsOptions()
	if o["StartType"] != "automatic" || o["OnFailure"] != "restart" {
		t.Errorf("options %v: want an automatic start and a restart on failure", o)
	}
	d, err := time.ParseDuration(o["OnFailureDelayDuration"].(string))
	if err != nil || d < time.Second || d > 5*time.Second {
		t.Errorf("OnFailureDelayDuration = %v, want 1 to 5 seconds", o["OnFailureDelayDuration"])
	}
	if _, ok := o["OnFailureResetPeriod"].(int); !ok {
		t.Errorf("OnFailureResetPeriod = %#v, want an int (kardianos reads it as one)", o["OnFailureResetPeriod"])
	}
}
