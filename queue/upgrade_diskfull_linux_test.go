package queue

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fillDisk writes a ballast file in dir until at most leave bytes of its
// file system are free, and returns its path.
func fillDisk(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*st.Bsize - leave
	p := filepath.Join(dir, "ballast")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for n > 0 {
		k, err := f.Write(buf[:min(int64(len(buf)), n)])
		n -= int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// A disk that fills during the upgrade from schema 5: the schema-5 file
// (compacted, so the upgrade must grow it) on a tmpfs with 0 to 2 MB
// left. Open either upgrades it or fails with ErrStorageFull, saying it
// was upgrading that file, and leaves the file as it was (every key and value) or,
// if the upgrade committed and a later step found the disk full, fully
// upgraded; failing again while the disk is full changes nothing. Once
// space returns, the file opens and shows exactly what an uninterrupted
// upgrade of it shows.
func TestUpgradeDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large file; run without -short")
	}
	f := newUpgradeFixture(t)
	if _, _, err := Compact(f.schema5); err != nil {
		t.Fatal(err)
	}
	if v := fileSchema(t, f.schema5); v != 5 {
		t.Fatalf("compacted: schema %d", v)
	}
	rows := fileRows(t, f.schema5)
	fi, err := os.Stat(f.schema5)
	if err != nil {
		t.Fatal(err)
	}
	dir := tinyDisk(t, int(3*fi.Size()+4<<20))
	path := filepath.Join(dir, "syncd.db")
	// place copies the file to the tmpfs, cut to its high-water mark:
	// bbolt's file is often longer, and the copy would take disk for all
	// of it, where the upgrade's pages would fit.
	place := func() {
		t.Helper()
		if err := copyFile(f.schema5, path); err != nil {
			t.Fatal(err)
		}
		m, err := readFileMeta(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, m.size); err != nil {
			t.Fatal(err)
		}
	}
	// How much disk the upgrade (and the purge and Close after it) takes:
	// the disk is left that much give or take.
	var st syscall.Statfs_t
	free := func() int64 {
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	place()
	before := free()
	s, err := Open(path, Config{Now: func() time.Time { return upgradeNow }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	g := before - free()
	t.Logf("the upgrade takes %d KB of disk", g>>10)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	var refused int
	for _, leave := range []int64{0, g / 2, g - 64<<10, g - 16<<10, g - 8<<10, g - 4<<10, g} {
		place()
		ballast := fillDisk(t, dir, leave)
		var failed int
		for try := range 2 {
			s, err := Open(path, Config{Now: func() time.Time { return upgradeNow }, Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				s.Close()
				t.Logf("%d KB left, try %d: upgraded", leave>>10, try)
				break
			}
			failed++
			if !errors.Is(err, ErrStorageFull) {
				t.Fatalf("%d KB left: Open: %v, want ErrStorageFull", leave>>10, err)
			}
			v := fileSchema(t, path)
			t.Logf("%d KB left, try %d: schema %d after %v", leave>>10, try, v, err)
			switch v {
			case 5:
				refused++
				// The error says what failed: the upgrade, of which file.
				if !strings.Contains(err.Error(), "upgrade "+path+" from schema 5 to") {
					t.Errorf("%d KB left: the failed upgrade says %q", leave>>10, err)
				}
				sameRows(t, rows, fileRows(t, path))
			case schemaVersion:
			default:
				t.Fatalf("schema %d", v)
			}
		}
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		sameView(t, "after the disk had filled", viewUpgraded(t, path), f.want)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	if refused == 0 {
		t.Fatal("the disk never filled during the upgrade")
	}
}

// sameRows fails t where two files' keys and values differ.
func sameRows(t *testing.T, want, got map[string]map[string]string) {
	t.Helper()
	for b, rows := range want {
		if len(got[b]) != len(rows) {
			t.Fatalf("bucket %s: %d keys, want %d", b, len(got[b]), len(rows))
		}
		for k, v := range rows {
			if got[b][k] != v {
				t.Fatalf("bucket %s key %q changed", b, k)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d buckets, want %d", len(got), len(want))
	}
}
