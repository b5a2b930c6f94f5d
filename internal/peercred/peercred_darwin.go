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
// terminating NUL: sun_path is 104 bytes on macOS.
const MaxPath = 103

// Get reads the credentials of the process that connected c, as
// the kernel recorded them at connect: the user id (LOCAL_PEERCRED) and
// the process id (LOCAL_PEERPID; 0 if the kernel does not say).
func Get(c *net.UnixConn) (uid, pid int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Xucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if credErr == nil {
			if p, err := unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
				pid = p
			}
		}
	}); err != nil {
		return 0, 0, err
	}
	if credErr != nil {
		return 0, 0, os.NewSyscallError("getsockopt LOCAL_PEERCRED", credErr)
	}
	return int(cred.Uid), pid, nil
}

// FileOwner is the user id owning the file of fi.
func FileOwner(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
