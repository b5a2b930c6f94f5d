package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Compaction thresholds for CompactIfWorthIt.
const (
	// CompactMinFileBytes: smaller files are never worth compacting.
	CompactMinFileBytes = 64 << 20
	// CompactMinFreeShare: compact when at least this share of the file
	// is free pages (bbolt never gives them back to the file system).
	CompactMinFreeShare = 0.5
)

// compactTxMaxSize bounds one copy transaction of Compact.
const compactTxMaxSize = 64 << 20

// Compact rewrites the data file at path without its free pages and
// returns its size before and after. The file must not be open: syncd
// must be stopped (bbolt's lock makes a running daemon's file fail here
// with ErrLocked). The copy is fsynced and renamed over the original, so
// a crash leaves either the old file or the new one.
func Compact(path string) (before, after int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("queue: compact: %w", err)
	}
	before = fi.Size()
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: DefaultLockTimeout, ReadOnly: true})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return before, 0, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return before, 0, fmt.Errorf("queue: compact: open %s: %w", path, err)
	}
	defer src.Close()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".compact")
	os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		return before, 0, fmt.Errorf("queue: compact: create %s: %w", tmp, err)
	}
	if err := bolt.Compact(dst, src, compactTxMaxSize); err != nil {
		dst.Close()
		os.Remove(tmp)
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		os.Remove(tmp)
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	src.Close()
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // make the rename durable where the OS supports it
		d.Close()
	}
	if fi, err := os.Stat(path); err == nil {
		after = fi.Size()
	}
	return before, after, nil
}

// CompactIfWorthIt compacts the file at path when it is at least
// CompactMinFileBytes and at least CompactMinFreeShare of it is free
// pages; `syncd run` calls it before opening the store. It reports
// whether it compacted. A missing file is not an error.
//
// It decides from the file's bbolt meta page and the count on its free
// list, three small reads, without opening the database. When the last
// commit did not write the free list (a process was killed after one, see
// freelist.go), counting the free pages would mean walking the whole
// file: it does not compact then, and the next start after a clean stop
// decides.
func CompactIfWorthIt(path string) (compacted bool, before, after int64, err error) {
	return compactIfWorthIt(path, CompactMinFileBytes)
}

// compactIfWorthIt is CompactIfWorthIt with the smallest file worth
// compacting as a parameter, for tests.
func compactIfWorthIt(path string, minFileBytes int64) (compacted bool, before, after int64, err error) {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return false, 0, 0, nil
	}
	if err != nil {
		return false, 0, 0, fmt.Errorf("queue: compact: %w", err)
	}
	if fi.Size() < minFileBytes {
		return false, fi.Size(), fi.Size(), nil
	}
	free, size, known, err := freeShare(path)
	if err != nil {
		return false, fi.Size(), fi.Size(), err
	}
	if !known || float64(free) < CompactMinFreeShare*float64(size) {
		return false, fi.Size(), fi.Size(), nil
	}
	before, after, err = Compact(path)
	return err == nil, before, after, err
}

// freeShare returns the file's free bytes and its size up to the
// high-water mark, as its meta page and free list say; known is false
// when the free list was not written.
func freeShare(path string) (free, size int64, known bool, err error) {
	m, err := readFileMeta(path)
	if err != nil {
		return 0, 0, false, fmt.Errorf("queue: compact: %w", err)
	}
	return m.freePages * m.pageSize, m.size, m.freelistKnown, nil
}
