//go:build !windows

package queue

import "syscall"

// noSpaceErrnos are the errors of a write that found no room.
var noSpaceErrnos = []error{syscall.ENOSPC, syscall.EDQUOT}
