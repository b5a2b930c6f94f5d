package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fill writes n creates (n partitions, each head ready) straight through
// the write path in large transactions: the loader of the claim
// benchmark.
func fill(tb testing.TB, s *Store, n int) {
	tb.Helper()
	const chunk = 20000
	data := json.RawMessage(`{"title":"benchmark row","n":1}`)
	for done := 0; done < n; {
		err := s.db.Update(func(tx *bolt.Tx) error {
			w := &txw{tx: tx, s: s, now: s.now(), fill: fills{}}
			for i := 0; i < chunk && done < n; i++ {
				if _, err := w.apply(&Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%08d", done), OperationID: fmt.Sprintf("op%08d", done), Data: data}); err != nil {
					return err
				}
				done++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkClaim measures a claim (and the release that puts the
// operation back, so the queue keeps its size) at 1,000 and at 1,000,000
// queued operations, side by side, and reports the ratio. fsync is off
// for both: it costs the same at any size and would hide the index cost
// this measures.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	sizes := []int{1000, 1000000}
	stores := make([]*Store, len(sizes))
	for i, n := range sizes {
		s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		fill(b, s, n)
		stores[i] = s
	}
	cycle := func(s *Store) {
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, op.ID, "w", false); err != nil {
			b.Fatal(err)
		}
	}
	// Warm both files' pages alike before timing.
	for range 200 {
		cycle(stores[0])
		cycle(stores[1])
	}
	var spent [2]time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		for i, s := range stores {
			t0 := time.Now()
			cycle(s)
			spent[i] += time.Since(t0)
		}
		n++
	}
	small := float64(spent[0].Nanoseconds()) / float64(n)
	big := float64(spent[1].Nanoseconds()) / float64(n)
	b.ReportMetric(small, "ns/claim@1k")
	b.ReportMetric(big, "ns/claim@1M")
	b.ReportMetric(big/small, "ratio_1M/1k")
}

// BenchmarkApply measures one create by itself, fsync off: its CPU time,
// what it allocates (mostly bbolt materialising the pages it touches),
// and the file it grows per create, after a warm-up of 5,000 creates.
func BenchmarkApply(b *testing.B) {
	path := filepath.Join(b.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", Data: json.RawMessage(`{"title":"benchmark row","body":"` + strings.Repeat("x", 64) + `","done":false}`)}
	for range 5000 {
		if _, err := s.Apply(context.Background(), w); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	n := 5000
	for b.Loop() {
		if _, err := s.Apply(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		n++
	}
	// The pages in use up to the file's high-water mark, not the file's
	// size: bbolt grows the file in steps, which made the figure move by a
	// fifth with the iteration count.
	var used int64
	if err := s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(used)/float64(n), "file_bytes/create")
}

// BenchmarkWritePath compares ways to commit app writes (entity +
// operation + index rows) with fsync on, at 1, 8 and 64 concurrent
// writers: the queue's group commit (Store.Apply), bbolt's DB.Batch with
// its default settings, DB.Batch sized to the writer count, and one
// DB.Update per write. It is the evidence behind the committer design.
func BenchmarkWritePath(b *testing.B) {
	data := json.RawMessage(`{"title":"benchmark row","n":1}`)
	for _, writers := range []int{1, 8, 64} {
		modes := []struct {
			name string
			do   func(s *Store, w Write) error
			set  func(db *bolt.DB)
		}{
			{"group_commit", func(s *Store, w Write) error { _, err := s.Apply(context.Background(), w); return err }, nil},
			{"batch_default", batchWrite, func(db *bolt.DB) {}},
			{"batch_sized", batchWrite, func(db *bolt.DB) { db.MaxBatchSize = writers; db.MaxBatchDelay = 2 * time.Millisecond }},
			{"update", func(s *Store, w Write) error {
				return s.db.Update(func(tx *bolt.Tx) error {
					_, err := (&txw{tx: tx, s: s, now: s.now()}).apply(&w)
					return err
				})
			}, nil},
		}
		for _, m := range modes {
			b.Run(fmt.Sprintf("%s/writers=%d", m.name, writers), func(b *testing.B) {
				s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if m.set != nil {
					m.set(s.db)
				}
				var next atomic.Int64
				start := time.Now()
				var wg sync.WaitGroup
				for range writers {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%d", i), OperationID: fmt.Sprintf("op%d", i), Data: data}
							if err := m.do(s, w); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
			})
		}
	}
}

func batchWrite(s *Store, w Write) error {
	_, err := s.ApplyViaBoltBatch(context.Background(), w)
	return err
}

// BenchmarkFreelistSync measures what writing bbolt's free list at a
// commit costs the write path (group commit, fsync on, 8 writers): never
// (the free list is rebuilt by walking the file at the next Open after a
// kill), while it fits in one page (the store's policy), and always. Each
// runs on a fresh file (a growing queue: a short list) and on one whose
// 20,000 creates were purged (a long list). The three modes take turns in
// rounds, so disk drift hits them alike; the ratios are to "never".
func BenchmarkFreelistSync(b *testing.B) {
	data := json.RawMessage(`{"title":"benchmark row","n":1}`)
	modes := []struct {
		name     string
		maxPages int
	}{{"never", -1}, {"short_only", freelistSyncMaxPages}, {"always", 1 << 30}}
	for _, long := range []bool{false, true} {
		state := "growing"
		if long {
			state = "long_free_list"
		}
		b.Run(state, func(b *testing.B) {
			stores := make([]*Store, len(modes))
			for i, m := range modes {
				s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if long {
					fill(b, s, 20000)
					if _, err := s.PurgeAccount(context.Background(), "acct", true); err != nil {
						b.Fatal(err)
					}
				}
				s.freelistMaxPages = m.maxPages
				stores[i] = s
			}
			const writers, perRound = 8, 200
			spent := make([]time.Duration, len(modes))
			writes := make([]int64, len(modes))
			var next atomic.Int64
			round := func(i int) {
				s := stores[i]
				var wg sync.WaitGroup
				t0 := time.Now()
				for range writers {
					wg.Go(func() {
						for range perRound / writers {
							n := next.Add(1)
							w := Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("w%d", n), OperationID: fmt.Sprintf("wop%d", n), Data: data}
							if _, err := s.Apply(context.Background(), w); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				spent[i] += time.Since(t0)
				writes[i] += perRound
			}
			for b.Loop() {
				for i := range modes {
					round(i)
				}
			}
			rate := func(i int) float64 { return float64(writes[i]) / spent[i].Seconds() }
			for i, m := range modes {
				b.ReportMetric(rate(i), m.name+"_writes/s")
				fmt.Printf("freelist sync %-14s %-10s %6.0f writes/s, %.2f of never (free list now %d pages)\n", state, m.name, rate(i), rate(i)/rate(0), stores[i].db.Stats().FreePageN)
			}
		})
	}
}

// BenchmarkApplyChanges measures a bootstrap's cost in the store: pages
// of 500 pulled records, never seen here, applied as the puller applies
// them (one transaction a page, with the cursor), fsync off. It reports
// changes applied per second of the store's time.
func BenchmarkApplyChanges(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const page = 500
	data := json.RawMessage(`{"title":"a pulled record","body":"` + strings.Repeat("x", 64) + `","done":false,"n":12}`)
	changes := make([]Change, page)
	cursor, n := "", 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range changes {
			n++
			changes[i] = Change{EntityType: "note", EntityID: fmt.Sprintf("r%08d", n), ServerID: fmt.Sprintf("srv-%08d", n), Version: 1, Data: data}
		}
		next := strconv.Itoa(n)
		if _, err := s.ApplyChanges(context.Background(), "acct", cursor, changes, next, false); err != nil {
			b.Fatal(err)
		}
		cursor = next
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "changes/s")
}
