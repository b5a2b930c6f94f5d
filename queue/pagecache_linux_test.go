//go:build linux && (amd64 || arm64)

package queue

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// What a start-up costs in I/O, measured through Linux: the data file's
// pages are dropped from the page cache before the start (so every page
// the start touches is a real read), then the pages back in the cache,
// the process's read_bytes and its resident set say what it touched.

// evictFile writes back and drops the file's pages from the page cache
// (posix_fadvise DONTNEED). It reports whether the kernel dropped them:
// tmpfs, for one, keeps them.
func evictFile(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return false, err
	}
	const fadvDontNeed = 4
	if _, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); e != 0 {
		return false, fmt.Errorf("fadvise: %w", e)
	}
	n, total, err := residentPages(path)
	if err != nil {
		return false, err
	}
	return n*20 < total || n < 16, nil // a few pages may be busy elsewhere
}

// residentPages counts the file's pages in the page cache (mincore over a
// mapping of it that is never touched).
func residentPages(path string) (resident, total int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, 0, err
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer syscall.Munmap(data)
	ps := os.Getpagesize()
	total = (len(data) + ps - 1) / ps
	vec := make([]byte, total)
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, 0, fmt.Errorf("mincore: %w", e)
	}
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident, total, nil
}

// procIO returns a process's read_bytes (bytes it made the kernel fetch
// from storage) from /proc/<pid>/io; pid 0 is this process.
func procIO(pid int) (int64, error) {
	return procField(pid, "io", "read_bytes:", 1)
}

// procRSS returns a process's resident set, all of it and its
// file-backed share (the data file's mapping), in bytes.
func procRSS(pid int) (rss, file int64, err error) {
	if rss, err = procField(pid, "status", "VmRSS:", 1024); err != nil {
		return 0, 0, err
	}
	file, err = procField(pid, "status", "RssFile:", 1024)
	return rss, file, err
}

func procField(pid int, name, field string, unit int64) (int64, error) {
	p := "/proc/self/" + name
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/%s", pid, name)
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n * unit, err
		}
	}
	return 0, fmt.Errorf("%s: no %s", p, field)
}

const pageCacheMeasured = true
