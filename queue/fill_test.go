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
		return keysPerPage(t, s, func(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(bucketReady).Bucket([]byte("acct")) }).perPage
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

// TestFillWhileSending: an app whose creates are sent as they are made
// (each create, then its completion, which rewrites the entity's row a
// little longer) keeps its entities' pages full. With bbolt's half-page
// splits they held 8 rows a page; with pages split full by the creates
// (which append) 15.
func TestFillWhileSending(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const n = 3000
	for i := range n {
		op, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: "note", Data: json.RawMessage(`{"title":"buy milk and bread","done":false,"tags":["home","errands"],"body":"xxxxxxxxxxxxxxxx"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, "acct", "w", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.Operation.ID, "w", Completion{ServerID: fmt.Sprintf("srv-%08d", i), ServerVersion: 1}); err != nil {
			t.Fatal(err)
		}
	}
	st := keysPerPage(t, s, func(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(bucketEntities) })
	perPage := st.perPage
	t.Logf("%d synced entities in %d leaf pages: %.1f a page", st.keys, st.pages, perPage)
	if perPage < 12 {
		t.Errorf("%.1f synced entities a page; want at least 12", perPage)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestFillRunsInReverse: entity types filled one after the other, each
// sorting before the last (an account's types, or accounts, that come
// in descending order), must not leave the entities' pages sparse. Each
// type's creates append to the end of its run, but that run's last page
// holds the next type's first keys: split full on each append, it stays
// full and the page's last key moves to a page of its own, 3 entities a
// page against bbolt's default 17. Want at least 12.
func TestFillRunsInReverse(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "syncd.db"), Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const types, perType = 120, 17
	for ty := types - 1; ty >= 0; ty-- {
		for range perType {
			if _, err := s.Apply(ctx, Write{Op: OpCreate, AccountID: "acct", EntityType: fmt.Sprintf("type%03d", ty), Data: json.RawMessage(`{"title":"buy milk and bread","done":false,"tags":["home","errands"],"body":"xxxxxxxxxxxxxxxx"}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := keysPerPage(t, s, func(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(bucketEntities) })
	perPage := st.perPage
	t.Logf("%d entities in %d leaf pages: %.1f a page", st.keys, st.pages, perPage)
	if perPage < 12 {
		t.Errorf("%.1f entities a page; want at least 12", perPage)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// leafUse is how a tree's keys sit in its leaf pages.
type leafUse struct {
	keys, pages int
	perPage     float64
}

// keysPerPage reads the leaf pages of the tree tree finds.
func keysPerPage(t *testing.T, s *Store, tree func(*bolt.Tx) *bolt.Bucket) leafUse {
	t.Helper()
	var st bolt.BucketStats
	if err := s.db.View(func(tx *bolt.Tx) error {
		st = tree(tx).Stats()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return leafUse{keys: st.KeyN, pages: st.LeafPageN, perPage: float64(st.KeyN) / float64(st.LeafPageN)}
}
