//go:build !windows

package main

import (
	"fmt"
	"os"
	"syscall"
)

// checkSocket: the Unix socket is this user's alone (mode 0600, owned by
// this user), as syncd makes it.
func (d *doctor) checkSocket() {
	if d.cf.socket == "" {
		return
	}
	fi, err := os.Stat(d.cf.socket)
	if err != nil {
		d.add("socket", checkWarn, err.Error(), "restart syncd: it makes the socket again")
		return
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	detail := fmt.Sprintf("%s, mode %v, owner uid %d", d.cf.socket, fi.Mode().Perm(), uid)
	if fi.Mode().Perm()&0o077 != 0 || uid != os.Getuid() {
		d.add("socket", checkWarn, detail+": other users may reach it, or it is not yours",
			"restart syncd as yourself: it makes the socket mode 0600")
		return
	}
	d.add("socket", checkOK, detail, "")
}

// diskSpace returns the free space (for this user) and the size of the
// file system holding dir.
func diskSpace(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
