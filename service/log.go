package service

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// LogFileName is the log file in the data directory of a Windows service.
const LogFileName = "syncd.log"

// LogOutput is where the program's log lines should go: stderr, which
// systemd's journal, launchd's log file and the SysV init script's log
// file all collect, except for a Windows service, whose stderr the
// service control manager drops: it gets dir/syncd.log, appended to.
// close closes what LogOutput opened.
func LogOutput(dir string, stderr io.Writer) (w io.Writer, close func() error, err error) {
	nop := func() error { return nil }
	if runtime.GOOS != "windows" || Interactive() {
		return stderr, nop, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, LogFileName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nop, fmt.Errorf("service: log file: %w", err)
	}
	return f, f.Close, nil
}
