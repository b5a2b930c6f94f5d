package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
)

// bbolt keeps its free list (the pages no tree uses) in memory. Written to
// the file at a commit, it lets the next Open read a few pages instead of
// walking every page of every tree to rebuild it, which at a million
// queued operations read the whole 1.7 GB file and took 1.3 s with the
// file in the page cache, 29 s without. Writing it at every commit costs
// a page or more per commit, so the store writes it:
//
//   - at Close: a clean stop leaves it on disk, and the next start reads
//     only the pages it needs (the meta pages, the free list, the few
//     pages of the first reads);
//   - at a commit while it fits in freelistSyncMaxPages pages, so that
//     after a kill, too, the next start usually finds it. A queue that
//     grows frees few pages (each commit's copy-on-write pages are reused
//     at once); the list grows long after a large drain and sweep, and
//     then it is not written until Close, and a start after a kill walks
//     the trees (their pages in use only, not the free ones).

// freelistSyncMaxPages bounds the free list written at every commit:
// 509 page ids fit in one 4 KB page.
const freelistSyncMaxPages = 1

// syncFreelistIfSmall sets whether the commit of tx writes bbolt's free
// list: when the free list (free and pending pages, as of the last
// commit or as loaded at open) fits in freelistSyncMaxPages pages. tx
// must be the write transaction, so that no other goroutine reads the
// setting meanwhile.
func (s *Store) syncFreelistIfSmall(tx *bolt.Tx) {
	st := s.db.Stats()
	// bbolt writes a page header and a page id per page (and a count
	// first when they are 64K or more).
	size := 16 + 8*(st.FreePageN+st.PendingPageN+1)
	tx.DB().NoFreelistSync = size > s.freelistMaxPages*s.pageSize
}

// writeFreelist commits the free list, so the next Open reads it instead
// of rebuilding it. Close calls it.
func (s *Store) writeFreelist() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		tx.DB().NoFreelistSync = false
		return nil
	})
}

// fileMeta is what the data file's bbolt meta page says, read without
// opening the database.
type fileMeta struct {
	pageSize int64
	txid     uint64
	// size is the bytes up to the high-water mark (what tx.Size says).
	size int64
	// freePages is the number of free pages on the written free list;
	// freelistKnown is false when the last commit did not write the list
	// (a process was killed after such a commit).
	freePages     int64
	freelistKnown bool
}

// bbolt's file format (version 2): a page starts with a 16-byte header
// (id u64, flags u16, count u16, overflow u32); a meta page holds, after
// it: magic u32, version u32, pageSize u32, flags u32, root bucket (root
// pgid u64, sequence u64), freelist pgid u64, high-water pgid u64, txid
// u64, and an FNV-64a checksum of the fields before it. Pages 0 and 1 are
// meta pages; the valid one with the larger txid is current. Integers are
// in the machine's byte order.
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeader     = 16
	boltMetaSize       = 56 // up to the checksum
	boltPgidNoFreelist = ^uint64(0)
	boltFreelistFlag   = 0x10
)

var errBadMeta = errors.New("queue: no valid bbolt meta page")

// readFileMeta reads the current meta page of the bbolt file at path and
// the count of its written free list: three small reads, whatever the
// file's size.
func readFileMeta(path string) (fileMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return fileMeta{}, err
	}
	defer f.Close()
	var best *fileMeta
	var bestFreelist uint64
	pageSize := int64(0)
	for i := range 2 {
		buf := make([]byte, boltPageHeader+boltMetaSize+8)
		off := int64(i) * pageSize
		if i == 1 && pageSize == 0 {
			off = int64(os.Getpagesize()) // meta 0 unreadable: bbolt's default page size
		}
		if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return fileMeta{}, err
		}
		m := buf[boltPageHeader:]
		ne := binary.NativeEndian
		h := fnv.New64a()
		h.Write(m[:boltMetaSize])
		if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion || ne.Uint64(m[boltMetaSize:]) != h.Sum64() {
			continue
		}
		ps := int64(ne.Uint32(m[8:]))
		if i == 0 {
			pageSize = ps
		}
		fm := fileMeta{pageSize: ps, txid: ne.Uint64(m[48:]), size: int64(ne.Uint64(m[40:])) * ps}
		if best == nil || fm.txid > best.txid {
			best, bestFreelist = &fm, ne.Uint64(m[32:])
		}
	}
	if best == nil {
		return fileMeta{}, fmt.Errorf("%w: %s", errBadMeta, path)
	}
	if bestFreelist == boltPgidNoFreelist {
		return *best, nil
	}
	hdr := make([]byte, boltPageHeader+8)
	if _, err := f.ReadAt(hdr, int64(bestFreelist)*best.pageSize); err != nil {
		return fileMeta{}, err
	}
	ne := binary.NativeEndian
	if ne.Uint16(hdr[8:])&boltFreelistFlag == 0 {
		return fileMeta{}, fmt.Errorf("%w: %s: page %d is not a free list", errBadMeta, path, bestFreelist)
	}
	n := int64(ne.Uint16(hdr[10:]))
	if n == 0xFFFF { // a long list keeps its count in its first element
		n = int64(ne.Uint64(hdr[boltPageHeader:]))
	}
	best.freePages, best.freelistKnown = n, true
	return *best, nil
}
