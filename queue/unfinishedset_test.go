package queue

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The unfinished bitmaps hold exactly the seqs put in and not taken out,
// across block edges; iteration from any seq yields them in order, and
// a block left empty has no key.
func TestUnfinishedSet(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rnd := rand.New(rand.NewPCG(1, 2))
	want := map[uint64]bool{}
	for round := range 20 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			w := &txw{tx: tx, s: s}
			for range 200 {
				seq := uint64(rnd.IntN(5 * unfinishedBlockBits))
				if rnd.IntN(4) == 0 { // a block's first or last seq
					seq = unfinishedBlockBits*uint64(rnd.IntN(5)) + uint64(rnd.IntN(2))*(unfinishedBlockBits-1)
				}
				if want[seq] {
					if err := w.delUnfinished(seq); err != nil {
						return err
					}
					delete(want, seq)
				} else {
					if err := w.addUnfinished(seq); err != nil {
						return err
					}
					want[seq] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.db.View(func(tx *bolt.Tx) error {
			sorted := slices.Sorted(func(yield func(uint64) bool) {
				for k := range want {
					if !yield(k) {
						return
					}
				}
			})
			for _, from := range []uint64{0, 1, unfinishedBlockBits - 1, unfinishedBlockBits, 2*unfinishedBlockBits + 7, 10 * unfinishedBlockBits} {
				var got, exp []uint64
				for seq := range unfinishedSeqs(tx, from) {
					got = append(got, seq)
				}
				for _, seq := range sorted {
					if seq >= from {
						exp = append(exp, seq)
					}
				}
				if !slices.Equal(got, exp) {
					t.Fatalf("round %d, from %d: got %v, want %v", round, from, got, exp)
				}
			}
			if n := countUnfinished(tx); n != len(want) {
				t.Fatalf("count %d, want %d", n, len(want))
			}
			for seq := range uint64(5 * unfinishedBlockBits) {
				if isUnfinishedSeq(tx, seq) != want[seq] {
					t.Fatalf("seq %d: in the set %v", seq, !want[seq])
				}
			}
			return tx.Bucket(bucketUnfinished).ForEach(func(k, v []byte) error {
				if slices.Equal(v, make([]byte, unfinishedBlockBytes)) {
					t.Fatalf("block %x is empty but kept", k)
				}
				return nil
			})
		})
	}
}
