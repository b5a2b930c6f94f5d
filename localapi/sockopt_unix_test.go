//go:build unix

package localapi_test

import "syscall"

// setRcvbuf sizes a socket's receive buffer before it connects, so the
// window it advertises is small from the start.
func setRcvbuf(fd uintptr, n int) error {
	return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
}

const canSetRcvbuf = true
