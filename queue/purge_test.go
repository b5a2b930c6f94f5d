package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// purgeFixture fills a store with account acct's unfinished and done
// operations and entities, and one entity of another account.
func purgeFixture(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	for i := range 7 {
		mustApply(t, s, Write{Op: OpCreate, EntityID: fmt.Sprintf("n%d", i), Data: json.RawMessage(`{"i":1}`)})
	}
	for range 4 { // four of them reach the server
		op, err := s.Claim(ctx, "acct", "w", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(ctx, op.ID, "w", Completion{ServerID: "s-" + op.EntityID}); err != nil {
			t.Fatal(err)
		}
	}
	mustApply(t, s, Write{Op: OpCreate, AccountID: "other", EntityID: "keep", Data: json.RawMessage(`{}`)})
}

// purged checks that nothing of acct is left and other's entity is.
func purged(t *testing.T, s *Store) {
	t.Helper()
	for i := range 7 {
		if _, err := s.GetEntity("acct", "note", fmt.Sprintf("n%d", i)); !errors.Is(err, ErrEntityNotFound) {
			t.Fatalf("entity n%d after the purge: %v", i, err)
		}
	}
	ops, _, err := s.ListOperations(ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.AccountID == "acct" {
			t.Fatalf("operation %s of the purged account is left (%s)", op.ID, op.State)
		}
	}
	if _, err := s.GetEntity("other", "note", "keep"); err != nil {
		t.Fatalf("the other account's entity: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// A purge deletes in bounded transactions: another account's write
// commits between two chunks, and the account cannot sign in again until
// the purge has finished.
func TestPurgeInChunks(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t, Config{NoSync: true})
	purgeFixture(t, s)
	purgeChunk, purgeScanChunk = 2, 5
	chunks := 0
	purgeChunkDone = func(chunk int) error {
		chunks = chunk
		if chunk == 1 {
			mustApply(t, s, Write{Op: OpCreate, AccountID: "other", EntityID: "between", Data: json.RawMessage(`{}`)})
			if err := s.SaveSession(ctx, &Session{AccountID: "acct", AccessToken: "t"}, Event{}); !errors.Is(err, ErrPurging) {
				t.Errorf("sign-in during the purge: %v, want ErrPurging", err)
			}
		}
		return nil
	}
	t.Cleanup(func() { purgeChunk, purgeScanChunk, purgeChunkDone = 1000, 20000, nil })
	n, err := s.PurgeAccount(ctx, "acct", true)
	if err != nil || n != 3 {
		t.Fatalf("purge = %d, %v; want 3 unfinished removed", n, err)
	}
	if chunks < 4 {
		t.Fatalf("the purge ran in %d chunks, want several", chunks)
	}
	purged(t, s)
	if _, err := s.GetEntity("other", "note", "between"); err != nil {
		t.Fatalf("the write between chunks: %v", err)
	}
	if err := s.SaveSession(ctx, &Session{AccountID: "acct", AccessToken: "t"}, Event{}); err != nil {
		t.Fatalf("sign-in after the purge: %v", err)
	}
}

// A purge a crash cuts short after any chunk is finished by the next
// Open.
func TestPurgeResumesAfterACrash(t *testing.T) {
	ctx := context.Background()
	errCrash := errors.New("crash")
	for stop := 1; stop <= 6; stop++ {
		path := filepath.Join(t.TempDir(), "syncd.db")
		s, err := Open(path, Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		purgeFixture(t, s)
		purgeChunk, purgeScanChunk = 2, 5
		purgeChunkDone = func(chunk int) error {
			if chunk == stop {
				return errCrash
			}
			return nil
		}
		_, err = s.PurgeAccount(ctx, "acct", true)
		purgeChunk, purgeScanChunk, purgeChunkDone = 1000, 20000, nil
		if !errors.Is(err, errCrash) {
			t.Fatalf("stop after chunk %d: %v", stop, err)
		}
		if err := s.Check(); err != nil {
			t.Fatalf("stop after chunk %d: %v", stop, err)
		}
		s.Close()
		s, err = Open(path, Config{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		purged(t, s)
		s.Close()
	}
}
