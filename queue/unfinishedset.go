package queue

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"iter"
	"math/bits"

	bolt "go.etcd.io/bbolt"
)

// The unfinished index is a set of seqs kept as bitmaps: the key is a
// block number (seq / unfinishedBlockBits, 8 bytes big-endian), the
// value a bitmap of the block's seqs (bit i of byte i/8, from the low
// bit: seq block*unfinishedBlockBits + i), and a block with no
// unfinished operation has no key. Schema 4 kept one key per operation
// (seq → empty, bucket "unfinished"): about 167 keys to a page, and
// bbolt turns every key of a page a write touches into a 64-byte node
// entry, so adding one seq allocated some 20 KB per write (BenchmarkApply)
// and took 24 bytes of file per queued operation. A block holds 1,024
// seqs in 128 bytes; adding a seq rewrites one value in place.
const (
	unfinishedBlockBits  = 1024
	unfinishedBlockBytes = unfinishedBlockBits / 8
)

// bucketUnfinishedV4 is schema 4's unfinished index (seq → empty), which
// Open turns into the bitmaps (upgradeUnfinished).
var bucketUnfinishedV4 = []byte("unfinished")

func unfinishedBlock(seq uint64) (key []byte, byteIdx int, mask byte) {
	bit := seq % unfinishedBlockBits
	return u64(seq / unfinishedBlockBits), int(bit / 8), 1 << (bit % 8)
}

// addUnfinished puts seq in the unfinished index.
func (w *txw) addUnfinished(seq uint64) error {
	b := w.b(bucketUnfinished)
	key, i, mask := unfinishedBlock(seq)
	block := make([]byte, unfinishedBlockBytes)
	copy(block, b.Get(key)) // bytes bbolt owns: changed in a copy
	block[i] |= mask
	return w.put(b, key, block)
}

// delUnfinished takes seq out of the unfinished index.
func (w *txw) delUnfinished(seq uint64) error {
	b := w.b(bucketUnfinished)
	key, i, mask := unfinishedBlock(seq)
	old := b.Get(key)
	if len(old) != unfinishedBlockBytes || old[i]&mask == 0 {
		return nil
	}
	block := make([]byte, unfinishedBlockBytes)
	copy(block, old)
	block[i] &^= mask
	for _, x := range block {
		if x != 0 {
			return w.put(b, key, block)
		}
	}
	return w.del(b, key)
}

// isUnfinishedSeq reports whether seq is in the unfinished index.
func isUnfinishedSeq(tx *bolt.Tx, seq uint64) bool {
	key, i, mask := unfinishedBlock(seq)
	v := tx.Bucket(bucketUnfinished).Get(key)
	return len(v) == unfinishedBlockBytes && v[i]&mask != 0
}

// unfinishedSeqs yields the seqs of the unfinished index from seq from
// on, oldest first. The bitmaps it reads belong to tx.
func unfinishedSeqs(tx *bolt.Tx, from uint64) iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		c := tx.Bucket(bucketUnfinished).Cursor()
		for k, v := c.Seek(u64(from / unfinishedBlockBits)); k != nil; k, v = c.Next() {
			base := binary.BigEndian.Uint64(k) * unfinishedBlockBits
			for i, x := range v {
				for x != 0 {
					bit := uint64(bits.TrailingZeros8(x))
					x &^= 1 << bit
					if seq := base + uint64(i)*8 + bit; seq >= from && !yield(seq) {
						return
					}
				}
			}
		}
	}
}

// countUnfinished returns the number of seqs in the unfinished index.
func countUnfinished(tx *bolt.Tx) int {
	n := 0
	tx.Bucket(bucketUnfinished).ForEach(func(_, v []byte) error {
		for _, x := range v {
			n += bits.OnesCount8(x)
		}
		return nil
	})
	return n
}

// upgradeUnfinished turns schema 4's unfinished index (one key per seq)
// into the bitmaps, and deletes it. One pass over its keys, one put per
// block of 1,024 operations.
func upgradeUnfinished(tx *bolt.Tx) error {
	old := tx.Bucket(bucketUnfinishedV4)
	if old == nil {
		return nil
	}
	b := tx.Bucket(bucketUnfinished)
	b.FillPercent = 1
	var key, block []byte
	flush := func() error {
		if key == nil {
			return nil
		}
		return b.Put(key, block)
	}
	err := old.ForEach(func(k, _ []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("queue: unfinished index key %x is not a seq", k)
		}
		bk, i, mask := unfinishedBlock(readU64(k))
		if key == nil || string(bk) != string(key) {
			if err := flush(); err != nil {
				return err
			}
			key, block = bk, make([]byte, unfinishedBlockBytes)
		}
		block[i] |= mask
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bucketUnfinishedV4)
}

// opRows yields the operation rows from seq from on, by seq.
func opRows(tx *bolt.Tx, from uint64) iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		c := tx.Bucket(bucketOps).Cursor()
		for k, v := c.Seek(u64(from)); k != nil; k, v = c.Next() {
			if !yield(readU64(k), v) {
				return
			}
		}
	}
}

// unfinishedRows yields the rows of the unfinished operations from seq
// from on, by seq.
func unfinishedRows(tx *bolt.Tx, from uint64) iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) {
		ops := tx.Bucket(bucketOps)
		for seq := range unfinishedSeqs(tx, from) {
			if !yield(seq, ops.Get(u64(seq))) {
				return
			}
		}
	}
}

// unfinishedSeqsAnySchema yields the unfinished seqs of a file being
// upgraded: from schema 4's index while it is there, else the bitmaps.
func unfinishedSeqsAnySchema(tx *bolt.Tx) iter.Seq[uint64] {
	old := tx.Bucket(bucketUnfinishedV4)
	if old == nil {
		return unfinishedSeqs(tx, 0)
	}
	return func(yield func(uint64) bool) {
		c := old.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if !yield(readU64(k)) {
				return
			}
		}
	}
}

// upgradePartitions moves the partitions index of a file older than
// schema 6 (a key per unfinished operation: bucketPartitionsV5) into the
// entity rows, one put per partition, and drops it. An unfinished
// operation whose entity has no row stops the upgrade (the file is left
// as it was): syncd never writes one, and its operation would otherwise
// be in no partition.
func upgradePartitions(tx *bolt.Tx) error {
	old := tx.Bucket(bucketPartitionsV5)
	if old == nil {
		return nil
	}
	ents := tx.Bucket(bucketEntities)
	var key []byte
	var list []uint64
	flush := func() error {
		if key == nil {
			return nil
		}
		v := ents.Get(key)
		if v == nil {
			return fmt.Errorf("operation %d is unfinished and its entity %q has no row", list[0], key)
		}
		var row []byte
		if v[0] == rowV1 {
			_, _, _, tail, err := entityRowParts(v)
			if err != nil {
				return fmt.Errorf("decode entity %q: %w", key, err)
			}
			row = withUnfinished(v, tail, list)
		} else {
			e, refs, err := decodeEntityRow(key, v, false)
			if err != nil {
				return err
			}
			row = encodeEntityRow(e, refs, list)
		}
		return ents.Put(key, row)
	}
	c := old.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 10 || k[len(k)-9] != 0 {
			return fmt.Errorf("a partitions key %q", k)
		}
		ek, seq := k[:len(k)-9], readU64(k[len(k)-8:])
		if !bytes.Equal(ek, key) {
			if err := flush(); err != nil {
				return err
			}
			key, list = bytes.Clone(ek), nil
		}
		list = append(list, seq)
	}
	if err := flush(); err != nil {
		return err
	}
	return tx.DeleteBucket(bucketPartitionsV5)
}
