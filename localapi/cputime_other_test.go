//go:build !unix

package localapi_test

import "time"

func cpuTime() (time.Duration, bool) { return 0, false }
