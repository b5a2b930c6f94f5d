package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// importBatch writes n creates in one ApplyBatch (one Apply when n is
// 1), as the local API's
// /v1/batch makes them: entity ids made here, an Idempotency-Key and its
// request fingerprint each.
func importBatch(tb testing.TB, s *Store, from, n int) {
	tb.Helper()
	ws := make([]Write, n)
	for i := range ws {
		key := fmt.Sprintf("import-%d", from+i)
		fp := sha256.Sum256([]byte(key))
		ws[i] = Write{Op: OpCreate, AccountID: "alice", EntityType: "note", OperationID: key, RequestFingerprint: hex.EncodeToString(fp[:]), App: "importer",
			Data: json.RawMessage(fmt.Sprintf(`{"title":"note %d","body":"%s","done":false}`, from+i, strings.Repeat("x", 64)))}
	}
	if n == 1 {
		if _, err := s.Apply(context.Background(), ws[0]); err != nil {
			tb.Fatal(err)
		}
		return
	}
	if _, err := s.ApplyBatch(context.Background(), ws, false); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkEventLog measures what the change log costs creates (fsync
// off), imported (ApplyBatch of 100, as /v1/batch makes them) and one at
// a time (Apply): events per create, and the bytes of the events bucket
// (keys and rows) per create against the same events in the JSON form an
// event took before the row form (schema 2: about 276 bytes each, key
// apart), side by side from the same log. ratio is stored over JSON;
// issue 28's target is at most 0.25.
func BenchmarkEventLog(b *testing.B) {
	for _, per := range []int{100, 1} {
		name := "import"
		if per == 1 {
			name = "single"
		}
		b.Run(name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "syncd.db"), Config{NoSync: true, EventHistory: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			n := 0
			for b.Loop() {
				importBatch(b, s, n, per)
				n += per
			}
			reportEventLog(b, s, n)
		})
	}
}

func reportEventLog(b *testing.B, s *Store, n int) {
	var stored, asJSON, count int
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			stored += len(k) + len(v)
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	for since := uint64(0); ; {
		evs, _, err := s.Events(since, 10000)
		if err != nil {
			b.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			js, err := json.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			asJSON += 8 + len(js)
		}
		count += len(evs)
		since = evs[len(evs)-1].Seq
	}
	b.ReportMetric(float64(count)/float64(n), "events/create")
	b.ReportMetric(float64(stored)/float64(n), "stored_B/create")
	b.ReportMetric(float64(asJSON)/float64(n), "json_B/create")
	b.ReportMetric(float64(stored)/float64(asJSON), "ratio")
}
