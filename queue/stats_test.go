package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func accountStats(s *Store, account string) (map[State]int, time.Time, error) {
	st, err := s.StatsFor(account)
	if err != nil {
		return nil, time.Time{}, err
	}
	return st.Account.Counts, st.Account.OldestPending, nil
}

// StatsFor counts one account's operations, and finds its oldest
// unfinished one, whatever the other accounts hold.
func TestStatsFor(t *testing.T) {
	s, clock := setup(t, Config{NoSync: true})
	ctx := context.Background()
	write := func(account, id string) Result {
		t.Helper()
		return mustApply(t, s, Write{Op: OpCreate, AccountID: account, EntityID: id, Data: json.RawMessage(`{}`)})
	}
	bobFirst := write("bob", "b0").Operation
	clock.Advance(time.Minute)
	aliceFirst := write("alice", "a0").Operation
	write("alice", "a1")
	write("bob", "b1")
	// One of alice's fails, one of bob's is done.
	if op, err := s.Claim(ctx, "alice", "w", time.Minute); err != nil || op.ID != aliceFirst.ID {
		t.Fatalf("claim: %v %v", op.ID, err)
	}
	if err := s.Fail(ctx, aliceFirst.ID, "w", "validation", "x", false); err != nil {
		t.Fatal(err)
	}
	if op, err := s.Claim(ctx, "bob", "w", time.Minute); err != nil || op.ID != bobFirst.ID {
		t.Fatalf("claim: %v %v", op.ID, err)
	}
	if _, err := s.Complete(ctx, bobFirst.ID, "w", Completion{ServerID: "s"}); err != nil {
		t.Fatal(err)
	}

	counts, oldest, err := accountStats(s, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if counts[StatePending] != 1 || counts[StatePermanentFailed] != 1 || counts[StateDone] != 0 || len(counts) != len(States) {
		t.Errorf("alice's counts %v", counts)
	}
	if !oldest.Equal(aliceFirst.CreatedAt) {
		t.Errorf("alice's oldest %v, want %v (bob's older one is not hers)", oldest, aliceFirst.CreatedAt)
	}
	counts, _, _ = accountStats(s, "bob")
	if counts[StatePending] != 1 || counts[StateDone] != 1 {
		t.Errorf("bob's counts %v", counts)
	}
	counts, oldest, _ = accountStats(s, "carol")
	if counts[StatePending] != 0 || !oldest.IsZero() {
		t.Errorf("carol's counts %v, oldest %v", counts, oldest)
	}
	// Behind more than oldestUnscanned operations of another account, the
	// oldest is found in the account's partitions.
	for i := range oldestUnscanned + 6 {
		write("carol", fmt.Sprintf("c%d", i))
	}
	clock.Advance(time.Minute)
	dave := write("dave", "d0").Operation
	clock.Advance(time.Minute)
	write("dave", "d1")
	if _, oldest, _ := accountStats(s, "dave"); !oldest.Equal(dave.CreatedAt) {
		t.Errorf("dave's oldest %v, want %v", oldest, dave.CreatedAt)
	}
	if _, oldest, _ := accountStats(s, "erin"); !oldest.IsZero() {
		t.Errorf("erin has no operations, oldest %v", oldest)
	}

	// A purge takes the account's counts with its operations.
	if _, err := s.PurgeAccount(ctx, "bob", true); err != nil {
		t.Fatal(err)
	}
	if counts, oldest, _ := accountStats(s, "bob"); counts[StatePending]+counts[StateDone] != 0 || !oldest.IsZero() {
		t.Errorf("bob after the purge: %v, %v", counts, oldest)
	}
}

// A data file of schema 1 (counts in all only) gets its per-account
// counts when opened.
func TestUpgradeSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "syncd.db")
	s, err := Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []Write{
		{Op: OpCreate, AccountID: "alice", EntityType: "note", EntityID: "a", Data: json.RawMessage(`{}`)},
		{Op: OpUpdate, AccountID: "alice", EntityType: "note", EntityID: "a", Data: json.RawMessage(`{"v":1}`)},
		{Op: OpCreate, AccountID: "bob", EntityType: "note", EntityID: "b", Data: json.RawMessage(`{}`)},
	} {
		if _, err := s.Apply(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	// bob's op was attempted and waits for a retry; alice's never went.
	attempted, err := s.Claim(context.Background(), "bob", "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RetryAt(context.Background(), attempted.ID, "w", time.Now(), "network", "reset", false); err != nil {
		t.Fatal(err)
	}
	// Make it a schema 1 file: no per-account counts, and no op marked
	// maybe applied.
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCounts)
		var keys [][]byte
		b.ForEach(func(k, _ []byte) error {
			if k[0] == 0 {
				keys = append(keys, append([]byte(nil), k...))
			}
			return nil
		})
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchema, u64(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil {
		t.Fatal("Check passed a file without per-account counts")
	}
	s.Close()

	s, err = Open(path, Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	if counts, _, _ := accountStats(s, "alice"); counts[StatePending] != 2 {
		t.Errorf("alice's counts after the upgrade: %v", counts)
	}
	// Schema 1 did not know whether an attempt went out unanswered: an
	// attempted op may have been applied; one never attempted was not.
	if op, _ := s.GetOperation(attempted.ID); !op.MaybeApplied {
		t.Errorf("attempted op after the upgrade: maybeApplied false")
	}
	ops, _, _ := s.ListOperations(ListOptions{AccountID: "alice"})
	for _, op := range ops {
		if op.MaybeApplied {
			t.Errorf("never attempted op %s marked maybe applied", op.ID)
		}
	}
	s.db.View(func(tx *bolt.Tx) error {
		if v := readU64(tx.Bucket(bucketMeta).Get(metaSchema)); v != schemaVersion {
			t.Errorf("schema %d after the upgrade, want %d", v, schemaVersion)
		}
		return nil
	})
}

// countKeys are the state's key and the shares' keys, as read back by
// the stats (accountCountKey, typeCountKey, appCountKey).
func TestCountKeys(t *testing.T) {
	for _, app := range []string{"", "notes-app"} {
		op := &Operation{AccountID: "alice", EntityType: "note", App: app}
		want := [][]byte{[]byte(StatePending), accountCountKey("alice", StatePending), typeCountKey("alice", "note", StatePending)}
		if app != "" {
			want = append(want, appCountKey(app, StatePending))
		}
		if got := countKeys(op, StatePending); !reflect.DeepEqual(got, want) {
			t.Fatalf("countKeys with app %q = %q, want %q", app, got, want)
		}
	}
}
