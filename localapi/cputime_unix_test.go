//go:build unix

package localapi_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time so far; ok is false
// where it cannot be read.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
