//go:build !linux || !(amd64 || arm64)

package queue

import "errors"

// The page-cache measurements need Linux (on amd64 and arm64, where the
// fadvise system call takes its arguments as pagecache_linux_test.go
// passes them); elsewhere start-up is measured by its time only.

var errNoPageCache = errors.New("page cache measurements need Linux on amd64 or arm64")

func evictFile(string) (bool, error)           { return false, nil }
func residentPages(string) (int, int, error)   { return 0, 0, errNoPageCache }
func procIO(int) (int64, error)                { return 0, errNoPageCache }
func procRSS(int) (rss, file int64, err error) { return 0, 0, errNoPageCache }

const pageCacheMeasured = false
