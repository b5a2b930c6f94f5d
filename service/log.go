package service

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// LogFileName is the log file in the data directory of a Windows service.
const LogFileName = "syncd.log"

// MaxLogBytes bounds the log file LogOutput writes: past it the file is
// renamed to LogFileName + ".1" (replacing the one before) and a new one
// is started, so the log takes about twice this on disk at most (see
// logFile.rotate for when the rename fails).
const MaxLogBytes = 10 << 20

// LogOutput is where the program's log lines should go: stderr, which
// systemd's journal, launchd's log file and the SysV init script's log
// file all collect, except for a Windows service, whose stderr the
// service control manager drops: it gets dir/syncd.log, appended to and
// rotated at MaxLogBytes. close closes what LogOutput opened.
func LogOutput(dir string, stderr io.Writer) (w io.Writer, close func() error, err error) {
	nop := func() error { return nil }
	if runtime.GOOS != "windows" || Interactive() {
		return stderr, nop, nil
	}
	f, err := openLogFile(filepath.Join(dir, LogFileName), MaxLogBytes)
	if err != nil {
		return nil, nop, err
	}
	return f, f.Close, nil
}

// logFile is a log file that starts over, keeping one old file, when a
// write would take it past max bytes. Writes are whole log lines; one
// longer than max still goes out whole, into a file of its own.
type logFile struct {
	mu     sync.Mutex
	path   string
	max    int64
	f      *os.File // nil after a failed reopen: the next write tries again
	size   int64
	closed bool
}

func openLogFile(path string, max int64) (*logFile, error) {
	l := &logFile{path: path, max: max}
	if err := l.open(os.O_APPEND); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *logFile) open(flag int) error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|flag, 0o600)
	if err != nil {
		return fmt.Errorf("service: log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("service: log file: %w", err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, os.ErrClosed
	}
	if l.f != nil && l.size > 0 && l.size+int64(len(p)) > l.max {
		l.rotate(int64(len(p)))
	}
	if l.f == nil {
		if err := l.open(os.O_APPEND); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// rotate moves the file to path.1 and starts a new one, before a write
// of next bytes. Windows refuses the rename while another program (a
// virus scanner, an editor showing the old file) holds a file open: then
// the log goes on in the same file and the next write tries again, until
// the file would pass twice max, where it starts over in place rather
// than grow without bound.
func (l *logFile) rotate(next int64) {
	l.f.Close() // Windows renames no open file
	l.f = nil
	flag := os.O_TRUNC
	if err := os.Rename(l.path, l.path+".1"); err != nil && l.size+next <= 2*l.max {
		flag = os.O_APPEND
	}
	l.open(flag) // on failure l.f stays nil and Write tries again
}

func (l *logFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
