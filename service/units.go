package service

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The service manager's restart of a syncd that exited by itself (a
// crash, a failed start): within seconds, and not forever in a tight
// loop.
const (
	// RestartDelay is the wait before a restart (systemd RestartSec,
	// launchd ThrottleInterval, the Windows recovery action's delay).
	RestartDelay = 2 * time.Second
	// StartLimitBurst starts within StartLimitInterval make systemd give
	// up until the next manual start (then `systemctl reset-failed`).
	StartLimitBurst    = 10
	StartLimitInterval = 2 * time.Minute
	// StopTimeout is how long the service manager waits for syncd's
	// graceful stop before it kills it: above RunConfig.StopTimeout.
	StopTimeout = 30 * time.Second
)

// Unit is what the service files are rendered from.
type Unit struct {
	Name        string
	Description string
	// Executable and Arguments are the command line.
	Executable string
	Arguments  []string
	// User: a per-user service (systemd --user unit, launchd agent).
	User bool
	// WritablePaths are the paths a hardened system unit may write: the
	// data directory, and the socket's directory when it is elsewhere.
	// Everything else of the file system is read-only to it.
	WritablePaths []string
	// LogDirectory is where launchd writes the process's stdout and
	// stderr (NAME.out.log, NAME.err.log); "" leaves them unset.
	LogDirectory string
}

// SystemdUnit renders the systemd unit file of u.
//
// A user unit is wanted by default.target, the target a user manager
// reaches at login (a user manager has no multi-user.target). A system
// unit is wanted by multi-user.target and hardened: the file system is
// read-only but for u.WritablePaths, /home and /root are out of sight
// (unless a writable path is there), no new privileges, no
// capabilities, a private /tmp and /dev, the kernel's knobs, modules,
// logs and clock out of reach, only the unix and IP socket families,
// and system calls filtered to those of a service. `systemd-analyze
// security` rates it under 5.0 (test: TestSystemdUnitSecurity).
//
// Both restart a syncd that exited after RestartDelay; StartLimitBurst
// failed starts within StartLimitInterval stop the loop.
func SystemdUnit(u Unit) (string, error) {
	if err := u.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("[Unit]")
	w("Description=%s", systemdSpecifierEscape(u.Description))
	w("Documentation=https://github.com/syncd/syncd/blob/main/docs/service.md")
	if !u.User {
		// A user manager has no network-online.target.
		w("Wants=network-online.target")
		w("After=network-online.target")
	}
	w("StartLimitIntervalSec=%d", int(StartLimitInterval/time.Second))
	w("StartLimitBurst=%d", StartLimitBurst)
	w("")
	w("[Service]")
	w("Type=simple")
	words := make([]string, 0, 1+len(u.Arguments))
	for _, a := range append([]string{u.Executable}, u.Arguments...) {
		words = append(words, systemdQuote(a))
	}
	w("ExecStart=%s", strings.Join(words, " "))
	w("Restart=always")
	w("RestartSec=%d", int(RestartDelay/time.Second))
	w("TimeoutStopSec=%d", int(StopTimeout/time.Second))
	w("UMask=0077")
	w("NoNewPrivileges=yes")
	if !u.User {
		// The sandbox of a system service. A user manager can apply
		// only some of it, and only with unprivileged user namespaces:
		// the user unit keeps to what works everywhere.
		w("ProtectSystem=strict")
		for _, p := range u.WritablePaths {
			w("ReadWritePaths=%s", systemdQuote(p))
		}
		protectHome := "yes"
		for _, p := range u.WritablePaths {
			if underAny(p, "/home", "/root", "/run/user") {
				protectHome = "read-only" // the writable path is shown, the rest read-only
			}
		}
		w("ProtectHome=%s", protectHome)
		w("PrivateTmp=yes")
		w("PrivateDevices=yes")
		w("ProtectKernelTunables=yes")
		w("ProtectKernelModules=yes")
		w("ProtectKernelLogs=yes")
		w("ProtectControlGroups=yes")
		w("ProtectClock=yes")
		w("ProtectHostname=yes")
		w("ProtectProc=invisible")
		w("ProcSubset=pid")
		w("CapabilityBoundingSet=")
		w("AmbientCapabilities=")
		w("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6")
		w("RestrictNamespaces=yes")
		w("RestrictRealtime=yes")
		w("RestrictSUIDSGID=yes")
		w("LockPersonality=yes")
		w("MemoryDenyWriteExecute=yes")
		w("RemoveIPC=yes")
		w("PrivateMounts=yes")
		w("SystemCallArchitectures=native")
		w("SystemCallFilter=@system-service")
		w("SystemCallFilter=~@privileged @resources")
		// A filtered call fails (Go's runtime tries setrlimit at start
		// and goes on without it) instead of killing the process.
		w("SystemCallErrorNumber=EPERM")
	}
	w("")
	w("[Install]")
	if u.User {
		w("WantedBy=default.target")
	} else {
		w("WantedBy=multi-user.target")
	}
	return b.String(), nil
}

// LaunchdPlist renders the launchd property list of u: started at load
// (boot for a daemon, login for an agent), kept alive (restarted after
// RestartDelay when it exits), given StopTimeout to stop.
func LaunchdPlist(u Unit) (string, error) {
	if err := u.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(s string) { b.WriteString(s + "\n") }
	str := func(key, v string) {
		w("\t<key>" + key + "</key>")
		w("\t<string>" + xmlEscape(v) + "</string>")
	}
	w(`<?xml version="1.0" encoding="UTF-8"?>`)
	w(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">`)
	w(`<plist version="1.0">`)
	w("<dict>")
	str("Label", u.Name)
	w("\t<key>ProgramArguments</key>")
	w("\t<array>")
	for _, a := range append([]string{u.Executable}, u.Arguments...) {
		w("\t\t<string>" + xmlEscape(a) + "</string>")
	}
	w("\t</array>")
	w("\t<key>RunAtLoad</key>")
	w("\t<true/>")
	w("\t<key>KeepAlive</key>")
	w("\t<true/>")
	w("\t<key>ThrottleInterval</key>")
	w("\t<integer>" + strconv.Itoa(int(RestartDelay/time.Second)) + "</integer>")
	w("\t<key>ExitTimeOut</key>")
	w("\t<integer>" + strconv.Itoa(int(StopTimeout/time.Second)) + "</integer>")
	w("\t<key>Umask</key>")
	w("\t<integer>63</integer>") // 0077
	if u.LogDirectory != "" {
		str("StandardOutPath", filepath.Join(u.LogDirectory, u.Name+".out.log"))
		str("StandardErrorPath", filepath.Join(u.LogDirectory, u.Name+".err.log"))
	}
	w("</dict>")
	w("</plist>")
	return b.String(), nil
}

// WindowsOptions are the kardianos/service options of the Windows
// service: started at boot, and restarted by the service control
// manager RestartDelay after it fails (the failure count reset after a
// day without one).
func WindowsOptions() map[string]any {
	return map[string]any{
		"StartType":              "automatic",
		"DelayedAutoStart":       false,
		"OnFailure":              "restart",
		"OnFailureDelayDuration": RestartDelay.String(),
		"OnFailureResetPeriod":   int((24 * time.Hour) / time.Second),
	}
}

// check refuses what the service files cannot carry: kardianos/service
// reads them as templates, so "{{" must not appear, and a newline would
// end a unit file's line.
func (u Unit) check() error {
	if !nameRE.MatchString(u.Name) {
		return fmt.Errorf("service: name %q: want letters, digits, '.', '_' and '-'", u.Name)
	}
	all := append([]string{u.Description, u.Executable, u.LogDirectory}, u.Arguments...)
	all = append(all, u.WritablePaths...)
	for _, s := range all {
		if strings.Contains(s, "{{") || strings.ContainsAny(s, "\n\r\x00") {
			return fmt.Errorf("%w: %q: a service file cannot carry \"{{\", a newline or a NUL", ErrBadArgument, s)
		}
	}
	for _, p := range u.WritablePaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: writable path %q is not absolute", ErrBadArgument, p)
		}
	}
	return nil
}

// systemdQuote quotes one word of a unit file's command line (and a
// path setting): plain words as they are, others in double quotes with
// \ and " escaped; % (a specifier) and $ (a variable) are doubled.
func systemdQuote(s string) string {
	s = systemdSpecifierEscape(s)
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_@+=:,./-%", r))
	}) < 0 {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "$", "$$")
	return `"` + s + `"`
}

func systemdSpecifierEscape(s string) string { return strings.ReplaceAll(s, "%", "%%") }

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// underAny reports whether p is one of dirs or inside one.
func underAny(p string, dirs ...string) bool {
	p = filepath.Clean(p)
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
