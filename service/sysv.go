package service

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// What kardianos/service v1.3.0's SysV backend creates for a service
// NAME: the init script, its start (S50NAME) and kill (K02NAME) links in
// /etc/rc?.d, and — written by the script when it starts the service —
// a pid file and two log files (stdout to NAME.log, stderr to NAME.err).
const (
	sysvInitDir = "/etc/init.d"
	sysvPIDDir  = "/var/run"
	sysvLogDir  = "/var/log"
)

func sysvScript(name string) string { return filepath.Join(sysvInitDir, name) }

func sysvLogFile(name, ext string) string { return filepath.Join(sysvLogDir, name+"."+ext) }

// sysvStatus asks the init script itself. kardianos/service goes through
// `service NAME status`, whose exit status 1 for a stopped service it
// reports as an error with StatusUnknown.
func (m *Manager) sysvStatus() (Status, error) {
	script := sysvScript(m.cfg.Name)
	if _, err := os.Stat(script); errors.Is(err, os.ErrNotExist) {
		return NotInstalled, nil
	} else if err != nil {
		return NotInstalled, fmt.Errorf("service: status of %s: %w", m.cfg.Name, err)
	}
	out, err := exec.Command(script, "status").Output()
	text := strings.TrimSpace(string(out))
	switch {
	case strings.HasPrefix(text, "Running"):
		return Running, nil
	case strings.HasPrefix(text, "Stopped"):
		return Stopped, nil
	}
	if err == nil {
		err = errors.New("unexpected output")
	}
	return NotInstalled, fmt.Errorf("service: status of %s: %s status: %q: %w", m.cfg.Name, script, text, err)
}

// sysvLeftovers lists what kardianos/service's SysV uninstall leaves: the
// rc links that point at the service's init script, the pid file and the
// log files.
func sysvLeftovers(name string) []string {
	script := sysvScript(name)
	var files []string
	links, _ := filepath.Glob("/etc/rc?.d/*" + name)
	for _, l := range links {
		base := filepath.Base(l)
		if len(base) != len(name)+3 || (base[0] != 'S' && base[0] != 'K') {
			continue // another service whose name ends in ours
		}
		target, err := os.Readlink(l)
		if err != nil {
			continue
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(l), target)
		}
		if filepath.Clean(target) == script {
			files = append(files, l)
		}
	}
	return append(files,
		filepath.Join(sysvPIDDir, name+".pid"),
		sysvLogFile(name, "log"),
		sysvLogFile(name, "err"),
	)
}
