package peercred

import (
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Supported says that Get works here.
const Supported = true

// MaxPath is the longest socket path sockaddr_un holds with its
// terminating NUL: sun_path is 108 bytes on Linux.
const MaxPath = 107

// Get reads the credentials of the process that connected c, as
// the kernel recorded them at connect (SO_PEERCRED).
func Get(c *net.UnixConn) (uid, pid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, os.NewSyscallError("getsockopt SO_PEERCRED", credErr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// FileOwner is the user id owning the file of fi.
func FileOwner(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
