//go:build windows

package queue

import "syscall"

// noSpaceErrnos are the errors of a write that found no room:
// ERROR_HANDLE_DISK_FULL and ERROR_DISK_FULL.
var noSpaceErrnos = []error{syscall.Errno(39), syscall.Errno(112)}
