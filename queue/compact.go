package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

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
//
// Compact holds bbolt's exclusive lock on the original from before the
// copy until after the rename, and Open and Compact both check, once they
// hold the lock, that the file they opened is still the one at the path
// (openCurrent). So a store opened during a compaction waits for it and
// then opens the compacted file, never the one the rename replaced, and
// a second compaction waits and then compacts the new file. Each
// compaction copies into a temporary file of its own. On Windows, where a
// file that is open cannot be replaced, the original is closed first and
// the rename fails, changing nothing, if a store opened it in between.
func Compact(path string) (before, after int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("queue: compact: %w", err)
	}
	before = fi.Size()
	// Read-write, for bbolt's exclusive lock; NoFreelistSync so that
	// opening writes nothing.
	src, err := openCurrent(path, &bolt.Options{Timeout: DefaultLockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return before, 0, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return before, 0, fmt.Errorf("queue: compact: open %s: %w", path, err)
	}
	defer src.Close()
	removeStaleCompactions(path)
	if fi, err := os.Stat(path); err == nil {
		before = fi.Size() // the file this compaction holds
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".compact-*")
	if err != nil {
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	tmp := f.Name()
	f.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		os.Remove(tmp)
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
	if !renameOverOpenFile {
		src.Close()
	}
	if compactBeforeRename != nil {
		compactBeforeRename()
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return before, 0, fmt.Errorf("queue: compact: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync() // make the rename durable where the OS supports it
		d.Close()
	}
	src.Close() // only now may a waiting Open or Compact take the lock
	if fi, err := os.Stat(path); err == nil {
		after = fi.Size()
	}
	return before, after, nil
}

// renameOverOpenFile: the OS lets a file that is open (and mapped) be
// replaced by a rename. Windows does not.
const renameOverOpenFile = runtime.GOOS != "windows"

// Test seams: compactBeforeRename runs just before Compact's rename;
// openFile opens the data file for Open and Compact.
var (
	compactBeforeRename func()
	openFile            = os.OpenFile
)

// openCurrent opens the bbolt file at path and, once it holds bbolt's
// lock, checks that the file it opened is still the one at the path: a
// compaction may have renamed a new file over it while this open waited
// for the lock. It then opens again, a bounded number of times.
// removeStaleCompactions deletes the temporary files of compactions that
// were killed before their rename. The caller holds the file's exclusive
// lock, which every compaction holds from its copy to its rename, so no
// compaction is running.
func removeStaleCompactions(path string) {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+".compact-"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func openCurrent(path string, opts *bolt.Options) (*bolt.DB, error) {
	o := *opts
	var opened *os.File
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := openFile(name, flag, perm)
		opened = f
		return f, err
	}
	for range 8 {
		opened = nil
		db, err := bolt.Open(path, 0o600, &o)
		if err != nil {
			return nil, err
		}
		if opened == nil {
			db.Close()
			return nil, fmt.Errorf("queue: open %s: the file was not opened through the seam", path)
		}
		held, err := opened.Stat()
		if err != nil {
			db.Close()
			return nil, err
		}
		cur, err := os.Stat(path)
		if err == nil && os.SameFile(held, cur) {
			return db, nil
		}
		db.Close()
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("queue: %s is replaced again and again while opening", path)
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
