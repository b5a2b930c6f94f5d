package localapi

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/syncd/syncd/internal/peercred"
)

// SocketFileName is the Unix socket's file in the data directory, where
// `syncd run` puts it unless told otherwise.
const SocketFileName = "syncd.sock"

// UnixSocketSupported says whether ListenUnix works on this OS: Linux
// and macOS.
const UnixSocketSupported = peercred.Supported

// ListenUnix listens on a Unix socket at path for the local API, beside
// (or instead of) the loopback TCP listener; pass it to Server.Run.
//
// A Unix socket lets the kernel say who is calling: the listener reads
// the peer's credentials on accept (SO_PEERCRED on Linux, LOCAL_PEERCRED
// and LOCAL_PEERPID on macOS) and closes, without a byte of answer, any
// connection from a process whose user id is not this process's
// effective user id. The refusal is logged at warn with the peer's uid
// and pid, at most once a minute (with the count of refusals since the
// previous line), and Accept goes on to the next connection. The
// connections it returns are *PeerConn, carrying the peer's uid and pid.
// Requests on them still need the token: the socket adds a check, it
// replaces none.
//
// The file system keeps other users away first:
//
//   - The socket's directory is created with mode 0700 when missing. An
//     existing one that group or other may use (any of mode 0077), or
//     that another user owns, is refused, not chmodded: it may be
//     someone's home. So is one below a directory that another user
//     owns or may write to (but for sticky ones, as /tmp), as written or
//     with its links resolved: they could swap a directory on the way
//     for one of theirs (secureAncestors).
//   - The socket file is chmodded 0600 right after bind. Between the
//     two it has the umask's mode, but the 0700 directory keeps other
//     users from reaching it meanwhile.
//   - A socket file left at path by a process that is gone (a connect
//     to it is refused) is removed first. A live socket (one that
//     accepts, or whose backlog is full), or a file
//     of another kind (a regular file, a directory, a symbolic link), is
//     an error and is left alone.
//   - Closing the listener removes the socket file.
//
// path must fit the OS's sockaddr_un (see CheckSocketPath). Linux and
// macOS only; elsewhere (Windows keeps the loopback TCP listener)
// ListenUnix returns ErrUnixSocketUnsupported. logger nil means
// slog.Default().
func ListenUnix(path string, logger *slog.Logger) (net.Listener, error) {
	return listenUnix(path, logger, os.Geteuid())
}

// listenUnix is ListenUnix accepting the peers of user id uid: a test
// passes another one to be a foreign peer itself.
func listenUnix(path string, logger *slog.Logger, uid int) (*unixListener, error) {
	if err := CheckSocketPath(path); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	if err := socketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("localapi: listen on %s: %w", path, err)
	}
	// The socket was made with the umask's mode; the 0700 directory has
	// kept other users from reaching it until now. The directory and
	// those above it are this user's or root's (socketDir), so no one
	// else can have put a symbolic link at the path since the bind;
	// still, chmod follows links: look first.
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		ln.Close()
		return nil, fmt.Errorf("%w: %s is no longer the socket just made", ErrSocketPath, path)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("localapi: socket %s: %w", path, err)
	}
	// net.ListenUnix's default, kept on purpose: Close removes the file,
	// so no stale socket outlives a clean stop.
	ln.SetUnlinkOnClose(true)
	return &unixListener{UnixListener: ln, path: path, uid: uid, logger: logger, now: time.Now}, nil
}

// CheckSocketPath reports whether path can name a Unix socket of the
// local API on this OS: Linux or macOS, and at most the length the OS's
// sockaddr_un holds with its terminating NUL (107 bytes on Linux, 103
// on macOS). It does not touch the file system.
func CheckSocketPath(path string) error {
	if !peercred.Supported {
		return fmt.Errorf("%w on %s; use the loopback TCP listener", ErrUnixSocketUnsupported, runtime.GOOS)
	}
	if path == "" {
		return fmt.Errorf("%w: empty", ErrSocketPath)
	}
	if len(path) > peercred.MaxPath {
		return fmt.Errorf("%w: %s is %d bytes long; %s allows at most %d: choose a shorter path", ErrSocketPath, path, len(path), runtime.GOOS, peercred.MaxPath)
	}
	return nil
}

// socketDir makes dir, the socket's directory, if it is missing (mode
// 0700, parents too), and checks that it is private: a directory, owned
// by this user, with no group or other permission.
func socketDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("localapi: socket directory: %w", err)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("localapi: socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrSocketPath, dir)
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o; make it private (chmod 700 %s) or put the socket in a directory of your own", ErrSocketDirMode, dir, m, dir)
	}
	if owner, ok := peercred.FileOwner(fi); ok && owner != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to user id %d, not to this one (%d); put the socket in a directory of your own", ErrSocketDirMode, dir, owner, os.Geteuid())
	}
	return secureAncestors(dir)
}

// secureAncestors checks the directories above dir, as written and with
// its symbolic links resolved: each must belong to root or to this user,
// and no one else may write to it unless its sticky bit is set (as /tmp
// has). Otherwise another user could rename a directory on the way and
// put one of their own in its place: the daemon's socket would move out
// of reach, and a socket of theirs take the path, to which the CLI and
// the apps would send the token.
func secureAncestors(dir string) error {
	paths := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		paths = append(paths, real)
	}
	for _, p := range paths {
		for a := filepath.Dir(p); ; a = filepath.Dir(a) {
			fi, err := os.Stat(a)
			if err != nil {
				return fmt.Errorf("localapi: socket directory %s: %w", a, err)
			}
			owner, ok := peercred.FileOwner(fi)
			if ok && owner != 0 && owner != os.Geteuid() {
				return fmt.Errorf("%w: %s, above the socket, belongs to user id %d, who could replace what it holds; put the socket in a directory of your own", ErrSocketDirMode, a, owner)
			}
			if m := fi.Mode(); m.Perm()&0o022 != 0 && m&fs.ModeSticky == 0 {
				return fmt.Errorf("%w: %s, above the socket, has mode %04o: others may replace what it holds; remove their write permission (chmod go-w %s) or put the socket elsewhere", ErrSocketDirMode, a, m.Perm(), a)
			}
			if a == filepath.Dir(a) {
				break
			}
		}
	}
	return nil
}

// removeStaleSocket removes a socket file at path that no process
// listens on. Anything else at path is an error and stays.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localapi: socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s exists and is not a socket (%v); move it away or choose another path", ErrSocketPath, path, fi.Mode().Type())
	}
	c, err := net.Dial("unix", path)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s: another process is listening on it", ErrSocketPath, path)
	}
	// Only a refusal says that no one listens: a full backlog (EAGAIN)
	// or a stopped process is a live socket.
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %s: cannot tell whether a process listens on it (%v); stop that process, or remove the file if none does", ErrSocketPath, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localapi: remove stale socket: %w", err)
	}
	return nil
}

// PeerConn is a connection accepted by the listener of ListenUnix: the
// Unix socket connection and the credentials of the process at the other
// end, as the kernel recorded them when it connected.
type PeerConn struct {
	*net.UnixConn
	// UID is the peer's effective user id (always this process's: other
	// users' connections are refused).
	UID int
	// PID is the peer's process id; 0 where the OS does not say.
	PID int
}

// unixListener is ListenUnix's listener: it refuses the peers of other
// users.
type unixListener struct {
	*net.UnixListener
	path    string
	uid     int // the user whose peers are accepted
	logger  *slog.Logger
	now     func() time.Time // for the refusal log's rate
	refused refusalLog
}

// Accept returns the next connection of a peer of the listener's user,
// as a *PeerConn. Other peers, and those whose credentials cannot be
// read, are closed and logged; Accept goes on waiting. It returns an
// error only when the listener's own accept fails (closed, out of file
// descriptors), as http.Server expects.
func (l *unixListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, pid, err := peercred.Get(c)
		if err != nil {
			l.refused.log(l.logger, l.now(), "localapi: closed a connection to the Unix socket whose peer credentials could not be read", "path", l.path, "err", err)
			c.Close()
			continue
		}
		if uid != l.uid {
			l.refused.log(l.logger, l.now(), "localapi: refused a connection to the Unix socket from another user", "path", l.path, "uid", uid, "pid", pid)
			c.Close()
			continue
		}
		return &PeerConn{UnixConn: c, UID: uid, PID: pid}, nil
	}
}

// refusalLog logs refused connections at most once per refusalLogEvery,
// with how many were refused since the previous line: a loop of
// connections cannot flood the log.
type refusalLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

// refusalLogEvery bounds how often refused peers are logged.
const refusalLogEvery = time.Minute

func (r *refusalLog) log(logger *slog.Logger, now time.Time, msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < refusalLogEvery {
		r.missed++
		return
	}
	logger.Warn(msg, append(args, "refusedSinceLastLine", r.missed)...)
	r.last, r.missed = now, 0
}

// peerOf returns the peer of the Unix socket connection r came on; ok
// is false for a request that came over TCP (or was not served by Run).
func peerOf(r *http.Request) (p *PeerConn, ok bool) {
	p, ok = r.Context().Value(connKey{}).(*PeerConn)
	return p, ok
}

// fromUnixSocket reports whether r came over the Unix socket of
// ListenUnix, whose peer the kernel has shown to be this user: no
// browser can reach it.
func fromUnixSocket(r *http.Request) bool {
	_, ok := peerOf(r)
	return ok
}
