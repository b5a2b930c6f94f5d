package queue

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltFreelist opens the file read-only and returns what bbolt itself
// says: its free pages (reading or rebuilding the free list), the size up
// to the high-water mark, and the txid.
func boltFreelist(t *testing.T, path string) (free int, size int64, txid int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		size, txid = tx.Size(), tx.ID()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return db.Stats().FreePageN, size, txid
}

// readFileMeta reads what bbolt reads: the free-page count of a written
// free list, short or longer than the 16-bit count of its page header
// (then kept in its first element), the size and txid; and it says when
// the last commit did not write the list.
func TestReadFileMeta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		pageSize int
		pages    int // pages of data freed
	}{
		{"short list", 4096, 300},
		{"list longer than 65535", 512, 70000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "x.db")
			db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: tc.pageSize, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			value := make([]byte, tc.pageSize-64) // about a page each
			err = db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("b"))
				if err != nil {
					return err
				}
				b.FillPercent = 1
				for i := range tc.pages {
					if err := b.Put(u64(uint64(i)), value); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("b")) }); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			m, err := readFileMeta(path)
			if err != nil {
				t.Fatal(err)
			}
			free, size, txid := boltFreelist(t, path)
			if !m.freelistKnown || m.freePages != int64(free) || m.size != size || m.txid != uint64(txid) || m.pageSize != int64(tc.pageSize) {
				t.Fatalf("readFileMeta %+v; bbolt: %d free pages, size %d, txid %d", m, free, size, txid)
			}
			if free < tc.pages {
				t.Fatalf("only %d free pages", free)
			}

			// A commit without the free list (as after a kill).
			unsyncFreelist(t, path)
			if m, err = readFileMeta(path); err != nil || m.freelistKnown {
				t.Fatalf("after a commit without the free list: %+v %v", m, err)
			}
		})
	}
	t.Run("not a bbolt file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "x.db")
		if err := os.WriteFile(path, make([]byte, 3*4096), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readFileMeta(path); !errors.Is(err, errBadMeta) {
			t.Fatalf("readFileMeta of zeros: %v", err)
		}
	})
}

// The store writes the free list while it is short and at Close, so the
// next Open, after a kill too, reads it instead of walking the file; a
// long list is written only at Close.
func TestFreelistWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	written := func() bool {
		t.Helper()
		m, err := readFileMeta(path) // the file as a kill now would leave it
		if err != nil {
			t.Fatal(err)
		}
		return m.freelistKnown
	}
	create(t, s, "a", `{}`)
	if !written() {
		t.Fatal("a commit with a short free list did not write it")
	}
	fill(t, s, 8000)
	if _, err := s.PurgeAccount(ctx, "acct", true); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Write{Op: OpCreate, AccountID: "bob", EntityID: "b", Data: json.RawMessage(`{}`)})
	if st := s.db.Stats(); st.FreelistInuse <= s.pageSize {
		t.Fatalf("free list of %d bytes after a purge: want more than a page", st.FreelistInuse)
	}
	if written() {
		t.Fatal("a commit wrote a free list longer than a page")
	}
	free := s.db.Stats().FreePageN
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := readFileMeta(path)
	if err != nil || !m.freelistKnown {
		t.Fatalf("after Close: %+v %v", m, err)
	}
	// Close's commit frees the pages the last commit held pending.
	if m.freePages < int64(free) {
		t.Fatalf("Close wrote %d free pages; the store had %d", m.freePages, free)
	}
	s2, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, s2)
	s2.Close()
}

// CompactIfWorthIt decides from the meta page and the free list's count
// and never walks the file: after a kill (no free list written) it does
// not compact, and the next start after a clean stop does.
func TestCompactIfWorthItFromMeta(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	clock := newClock()
	s, err := Open(path, Config{Now: clock.Now, NoSync: true, EventHistory: 10})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s, 8000)
	// Most of the file free.
	if _, err := s.PurgeAccount(ctx, "acct", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	create(t, s, "kept", `{"keep":true}`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	const small = 1 << 20 // the threshold, lowered for the test
	if fi.Size() < small {
		t.Fatalf("file of %d bytes: the test needs more", fi.Size())
	}

	unsyncFreelist(t, path)
	if ok, _, _, err := compactIfWorthIt(path, small); ok || err != nil {
		t.Fatalf("compacted without a written free list: %v %v", ok, err)
	}
	s, err = Open(path, Config{Now: clock.Now, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := compactIfWorthIt(path, 1<<40); ok || err != nil {
		t.Fatalf("compacted a file below the threshold: %v %v", ok, err)
	}
	ok, before, after, err := compactIfWorthIt(path, small)
	if !ok || err != nil || after >= before/2 {
		t.Fatalf("compactIfWorthIt after a clean stop: %v %v, %d -> %d bytes", ok, err, before, after)
	}
	s, err = Open(path, Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustCheck(t, s)
	if _, err := s.GetEntity("acct", "note", "kept"); err != nil {
		t.Fatal(err)
	}
}

// A start that has nothing to write commits nothing, so the free list a
// clean stop left stays valid: a kill before the first write costs the
// next start nothing either. A start that recovers operations left
// sending commits, with the free list while it is short.
func TestOpenKeepsFreelist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	create(t, s, "a", `{}`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := readFileMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Config{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	// The file as a kill now would leave it.
	if m, err := readFileMeta(path); err != nil || m.txid != before.txid || !m.freelistKnown {
		t.Fatalf("after a start with nothing to do: %+v %v; before it %+v", m, err, before)
	}
	s.freelistMaxPages = -1 // the next commit leaves the free list out
	if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	if m, _ := readFileMeta(path); m.freelistKnown {
		t.Fatal("a commit with freelistMaxPages -1 wrote the free list")
	}
	// Killed while sending: the next start returns the op to pending, in
	// a commit that writes the (short) free list.
	copyPath := filepath.Join(t.TempDir(), "killed.db")
	if err := copyFile(path, copyPath); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(copyPath, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if m, err := readFileMeta(copyPath); err != nil || !m.freelistKnown {
		t.Fatalf("after a start that recovered a sending op: %+v %v", m, err)
	}
	if st, _ := s2.Stats(); st.Counts[StatePending] != 1 {
		t.Fatalf("counts after recovery: %v", st.Counts)
	}
	mustCheck(t, s2)
}
