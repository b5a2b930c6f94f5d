package queue

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkApplyVsBoltFloor puts a create through Store.Apply beside
// what bbolt itself costs per transaction that puts one key in each of
// k trees (k = 1, and 7: the trees a create writes: entities, ops,
// op_ids, ready, events, unfinished_set, counts), with the same key
// orders (appended or random), on files holding 5,000 rows (as BenchmarkApply), fsync off.
// It is the evidence on issue 28's per-create target (≤ 60 µs, ≤ 16 KB,
// ≤ 60 allocations): that is bbolt's floor for a transaction that
// touches ONE tree; a create touches seven, and bbolt materialises
// (decodes into a node, copies, re-encodes) every page it writes.
// ratio_vs_floor7 is Apply's time over the 7-tree floor's.
func BenchmarkApplyVsBoltFloor(b *testing.B) {
	const rows = 5000
	data := json.RawMessage(`{"title":"benchmark row","body":"` + strings.Repeat("x", 64) + `","done":false}`)
	floor := func(b *testing.B, trees int) (ns float64) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "floor.db"), 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		rnd := rand.New(rand.NewPCG(1, 2))
		val := make([]byte, 150)
		seq := uint64(0)
		put := func(tx *bolt.Tx) error {
			seq++
			for t := range trees {
				bk, err := tx.CreateBucketIfNotExists([]byte{byte('a' + t)})
				if err != nil {
					return err
				}
				k := make([]byte, 16)
				if t%2 == 0 { // appended, as ops and events are
					bk.FillPercent = 1
					binary.BigEndian.PutUint64(k, seq)
				} else { // random, as entity and operation ids are
					binary.BigEndian.PutUint64(k, rnd.Uint64())
				}
				binary.BigEndian.PutUint64(k[8:], seq)
				if err := bk.Put(k, val[:50+50*(t%3)]); err != nil {
					return err
				}
			}
			return nil
		}
		for range rows {
			if err := db.Update(put); err != nil {
				b.Fatal(err)
			}
		}
		return measure(b, func() error { return db.Update(put) })
	}
	var floor1, floor7 float64
	b.Run("bolt_floor/trees=1", func(b *testing.B) { floor1 = floor(b, 1) })
	b.Run("bolt_floor/trees=7", func(b *testing.B) { floor7 = floor(b, 7) })
	b.Run("apply", func(b *testing.B) {
		s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", Data: data}
		for range rows {
			if _, err := s.Apply(context.Background(), w); err != nil {
				b.Fatal(err)
			}
		}
		apply := measure(b, func() error { _, err := s.Apply(context.Background(), w); return err })
		if floor1 > 0 && floor7 > 0 {
			b.ReportMetric(apply/floor1, "ratio_vs_floor1")
			b.ReportMetric(apply/floor7, "ratio_vs_floor7")
		}
	})
}

// measure runs do b.N times with allocations reported, and returns its
// mean time in nanoseconds.
func measure(b *testing.B, do func() error) float64 {
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := do(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}
