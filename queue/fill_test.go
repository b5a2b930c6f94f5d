package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestFillAfterRetries: pages split full while creates append to the
// ready index must not leave it sparse once an outage puts every head
// back at a jittered time ahead (three times over, creates going on):
// a page filled full that takes a key in its middle splits in halves,
// not into a full page and a nearly empty one. Each leaf page (4 KB,
// keys of 32 bytes with their headers) must keep at least 40 keys on
// average (81 here); bbolt's default, half-page splits throughout, kept
// 85, and full splits throughout 18.
func TestFillAfterRetries(t *testing.T) {
	now := time.Unix(1e9, 0)
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), Config{NoSync: true, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	n := 0
	create := func() {
		n++
		if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", EntityID: fmt.Sprintf("e%08d", n), Data: json.RawMessage(`{"a":1}`)}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	perPage := func() float64 {
		var st bolt.BucketStats
		if err := s.db.View(func(tx *bolt.Tx) error {
			st = tx.Bucket(bucketReady).Bucket([]byte("acct")).Stats()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return float64(st.KeyN) / float64(st.LeafPageN)
	}
	const heads = 5000
	for range heads {
		create()
	}
	if got := perPage(); got < 100 {
		t.Errorf("after %d creates, %.1f keys a page in the ready index; want at least 100 (full pages)", heads, got)
	}
	for range 3 {
		for range heads {
			op, err := s.Claim(ctx, "acct", "w", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.RetryAt(ctx, op.ID, "w", now.Add(time.Second+time.Duration(rnd.Int64N(int64(5*time.Minute)))), "network", "unreachable", false); err != nil {
				t.Fatal(err)
			}
			if rnd.IntN(10) == 0 {
				create()
			}
		}
		now = now.Add(6 * time.Minute)
	}
	got := perPage()
	t.Logf("%.1f keys a page in the ready index after the retries", got)
	if got < 40 {
		t.Errorf("after the retries, %.1f keys a page in the ready index; want at least 40", got)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
