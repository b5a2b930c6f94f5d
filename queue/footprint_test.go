package queue

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// loadSpec describes a queue built by loadQueue: n creates as the local
// API makes them (a UUID entity id, an app's Idempotency-Key, its request
// fingerprint), each payload about payloadBytes of JSON.
type loadSpec struct {
	n            int
	payloadBytes int
	// syncdIDs: the app names nothing, as an app that calls POST
	// /v1/entities/{type} without an id or an Idempotency-Key does: syncd
	// makes the entity's id and the operation's (UUIDv7, in time order).
	syncdIDs bool
	// perTx is the creates a transaction holds; 0: a hundredth of n, at
	// most 20,000.
	perTx int
}

func (s loadSpec) String() string {
	name := fmt.Sprintf("payload=%d", s.payloadBytes)
	if s.syncdIDs {
		name += "/syncd_ids"
	}
	if s.perTx > 0 {
		name += fmt.Sprintf("/per_tx=%d", s.perTx)
	}
	return name
}

// fakeUUID returns a UUID-shaped id (36 characters) drawn from rnd, so a
// load is reproducible.
func fakeUUID(rnd *rand.Rand) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], rnd.Uint64())
	binary.BigEndian.PutUint64(b[8:], rnd.Uint64())
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// loadWrite is the i-th create of a load.
func loadWrite(rnd *rand.Rand, spec loadSpec) Write {
	body := `{"title":"buy milk and bread","done":false,"tags":["home","errands"],"body":""}`
	if pad := spec.payloadBytes - len(body); pad > 0 {
		body = body[:len(body)-2] + strings.Repeat("x", pad) + `"}`
	}
	if spec.syncdIDs {
		return Write{Op: OpCreate, AccountID: "acct-7f3a2c", EntityType: "note", Data: json.RawMessage(body)}
	}
	fp := sha256.Sum256([]byte(body))
	return Write{
		Op: OpCreate, AccountID: "acct-7f3a2c", EntityType: "note",
		EntityID: fakeUUID(rnd), OperationID: fakeUUID(rnd),
		RequestFingerprint: hex.EncodeToString(fp[:]),
		Data:               json.RawMessage(body),
	}
}

// loadQueue fills a new store at path with spec.n creates, applied
// through the same transaction code as Apply but many to a transaction
// (a hundredth of them, at most 20,000: few enough that each transaction
// lands in a small share of the trees' pages, as the app's writes do, so
// the pages fill as they would), and keeps the change log at its default
// history as the daemon's sweep would. It closes the store, as a clean
// stop does.
func loadQueue(tb testing.TB, path string, spec loadSpec) {
	tb.Helper()
	ctx := context.Background()
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(uint64(spec.n), uint64(spec.payloadBytes)))
	chunk := min(max(spec.n/100, 1), 20000)
	if spec.perTx > 0 {
		chunk = spec.perTx
	}
	for done := 0; done < spec.n; {
		err := s.db.Update(func(tx *bolt.Tx) error {
			w := &txw{tx: tx, s: s, now: s.now(), fill: fills{}}
			for i := 0; i < chunk && done < spec.n; i++ {
				wr := loadWrite(rnd, spec)
				if err := s.prepare(&wr); err != nil {
					return err
				}
				if _, err := w.apply(&wr); err != nil {
					return err
				}
				done++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		if done%20000 < chunk { // as often as 20,000 creates
			if _, _, err := s.Sweep(ctx); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if _, _, err := s.Sweep(ctx); err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// bucketUse is what one top-level bucket takes in the file.
type bucketUse struct {
	name  string
	keys  int
	alloc int // bytes of the pages it owns (branch + leaf), plus inline sub-buckets
	inuse int // bytes of those pages holding data
}

// footprint is where a file's bytes go.
type footprint struct {
	size    int64 // pages up to the high-water mark (tx.Size)
	free    int64 // bytes in free pages
	buckets []bucketUse
}

func measureFootprint(tb testing.TB, path string) footprint {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var f footprint
	err = db.View(func(tx *bolt.Tx) error {
		f.size = tx.Size()
		f.free = int64(db.Stats().FreePageN) * int64(db.Info().PageSize)
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			f.buckets = append(f.buckets, bucketUse{
				name:  string(name),
				keys:  st.KeyN,
				alloc: st.BranchAlloc + st.LeafAlloc + st.InlineBucketInuse,
				inuse: st.BranchInuse + st.LeafInuse + st.InlineBucketInuse,
			})
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	sort.Slice(f.buckets, func(i, j int) bool { return f.buckets[i].alloc > f.buckets[j].alloc })
	return f
}

// perOp is the bytes per queued operation of the buckets that grow with
// the queue: all but the change log, which the sweep keeps at
// Config.EventHistory events whatever the queue's size.
func (f footprint) perOp(n int) float64 {
	total := 0
	for _, u := range f.buckets {
		if u.name != string(bucketEvents) {
			total += u.alloc
		}
	}
	return float64(total) / float64(n)
}

// report is one line per bucket, in bytes per queued operation.
func (f footprint) report(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops: %.0f bytes/op in the queue's buckets; file %d bytes (%.0f bytes/op, %.0f of it free pages)\n", n, f.perOp(n), f.size, float64(f.size)/float64(n), float64(f.free)/float64(n))
	for _, u := range f.buckets {
		if u.alloc == 0 {
			continue
		}
		if u.name == string(bucketEvents) {
			fmt.Fprintf(&b, "  %-11s %8d keys  %7.0f bytes in all (the last events only)\n", u.name, u.keys, float64(u.alloc))
			continue
		}
		fmt.Fprintf(&b, "  %-11s %8d keys  %7.1f bytes/op in pages, %7.1f in use (%.0f%%)\n", u.name, u.keys, float64(u.alloc)/float64(n), float64(u.inuse)/float64(n), 100*float64(u.inuse)/float64(u.alloc))
	}
	return b.String()
}

// Bytes per queued create in the buckets that grow with the queue, at
// most: the footprint TestFootprint holds the store to. Schema 2 (JSON
// rows, the payload in both rows) took 1,700 and 24,000; schema 5 (a
// partitions tree) 760 and 11,830.
const (
	maxBytesPerSmallCreate = 700
	maxBytesPer10KBCreate  = 12500
	// Small creates whose ids syncd makes, one a transaction: their keys
	// come in order and their trees split full (fill.go); 807 bytes
	// before that, 496 now at this size (485 at 100,000).
	maxBytesPerSmallCreateSyncdIDs = 520
)

// TestFootprint builds queues of small and of 10 KB creates and checks
// the bytes each takes, per bucket.
func TestFootprint(t *testing.T) {
	for _, tc := range []struct {
		spec loadSpec
		max  float64
	}{
		{loadSpec{n: 2000, payloadBytes: 100}, maxBytesPerSmallCreate},
		{loadSpec{n: 500, payloadBytes: 10 << 10}, maxBytesPer10KBCreate},
		{loadSpec{n: 2000, payloadBytes: 100, syncdIDs: true, perTx: 1}, maxBytesPerSmallCreateSyncdIDs},
	} {
		t.Run(tc.spec.String(), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "syncd.db")
			loadQueue(t, path, tc.spec)
			f := measureFootprint(t, path)
			t.Log("\n" + f.report(tc.spec.n))
			if got := f.perOp(tc.spec.n); got > tc.max {
				t.Errorf("%.0f bytes per queued create of %d bytes; want at most %.0f", got, tc.spec.payloadBytes, tc.max)
			}
		})
	}
}

// BenchmarkFootprint prints where the bytes of a queue go, per bucket, for
// 100,000 small creates and 10,000 creates of 10 KB, and reports the bytes
// per queued create of each.
func BenchmarkFootprint(b *testing.B) {
	specs := []loadSpec{
		{n: 100000, payloadBytes: 100},
		{n: 10000, payloadBytes: 10 << 10},
		{n: 100000, payloadBytes: 100, syncdIDs: true},
		{n: 100000, payloadBytes: 100, syncdIDs: true, perTx: 1},
	}
	perOp := make([]float64, len(specs))
	for b.Loop() {
		for i, spec := range specs {
			path := filepath.Join(b.TempDir(), "syncd.db")
			loadQueue(b, path, spec)
			f := measureFootprint(b, path)
			perOp[i] = f.perOp(spec.n)
			fmt.Printf("footprint, %s: %s", spec, f.report(spec.n))
		}
	}
	b.ReportMetric(perOp[0], "bytes/small_create")
	b.ReportMetric(perOp[1], "bytes/10KB_create")
	b.ReportMetric(perOp[2], "bytes/small_create_syncd_ids")
	b.ReportMetric(perOp[3], "bytes/small_create_syncd_ids_alone")
}
