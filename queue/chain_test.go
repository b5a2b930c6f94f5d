package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

// TestClaimChains: behind a claimed update of an entity the server
// holds, the updates queued after it are claimed with it (sending, the
// head's owner, not ready), up to maxFollow and n; a create takes no
// followers; a follower released while its head is sending is not
// ready; the head's lease recovered after expiry brings its followers
// back to pending.
func TestClaimChains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clock := setup(t, Config{NoSync: true})
	write := func(op OpType, id, data string) Operation {
		t.Helper()
		r, err := s.Apply(ctx, Write{Op: op, AccountID: "a", EntityType: "note", EntityID: id, Data: json.RawMessage(data)})
		if err != nil {
			t.Fatal(err)
		}
		return r.Operation
	}
	c := write(OpCreate, "e1", `{"v":0}`)
	var us []Operation
	for i := range 4 {
		us = append(us, write(OpUpdate, "e1", fmt.Sprintf(`{"v":%d}`, i+1)))
	}
	// The create heads the partition: claimed alone.
	chains, err := s.ClaimChains(ctx, "a", "w1", time.Minute, 10, 1<<20, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(chains) != 1 || len(chains[0]) != 1 || chains[0][0].ID != c.ID {
		t.Fatalf("claimed %v, want the create alone", ids(chains))
	}
	if _, err := s.Complete(ctx, c.ID, "w1", Completion{ServerID: "s1", ServerVersion: 1}); err != nil {
		t.Fatal(err)
	}
	// Now the first update heads it, and two more follow (maxFollow 2).
	chains, err = s.ClaimChains(ctx, "a", "w2", time.Minute, 10, 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{us[0].ID, us[1].ID, us[2].ID}}; !slices.EqualFunc(ids(chains), want, slices.Equal) {
		t.Fatalf("claimed %v, want %v", ids(chains), want)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// Nothing else is ready: the fourth update waits behind the chain.
	if _, err := s.ClaimChains(ctx, "a", "w3", time.Minute, 10, 1<<20, 2); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim behind a chain: %v, want ErrNoReady", err)
	}
	// A follower released (its batch item was not applied) is pending
	// but not ready while its head sends.
	if err := s.ReleaseUnsent(ctx, us[2].ID, "w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimChains(ctx, "a", "w3", time.Minute, 10, 1<<20, 2); !errors.Is(err, ErrNoReady) {
		t.Fatalf("claim behind a chain with a released follower: %v, want ErrNoReady", err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// The lease expires: the head is claimed again, and its follower
	// with it (recovered, maybe applied).
	clock.Advance(2 * time.Minute)
	chains, err = s.ClaimChains(ctx, "a", "w4", time.Minute, 10, 1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{us[0].ID, us[1].ID}}; !slices.EqualFunc(ids(chains), want, slices.Equal) {
		t.Fatalf("claimed after expiry %v, want %v", ids(chains), want)
	}
	for _, op := range chains[0] {
		if !op.MaybeApplied || op.LeaseOwner != "w4" {
			t.Fatalf("recovered op %s: maybeApplied %v, owner %q", op.ID, op.MaybeApplied, op.LeaseOwner)
		}
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func ids(chains [][]Operation) [][]string {
	var out [][]string
	for _, c := range chains {
		var ids []string
		for _, op := range c {
			ids = append(ids, op.ID)
		}
		out = append(out, ids)
	}
	return out
}

// TestChainsKeepPartitionOrder: random writes over a few entities,
// claims of chains, and outcomes recorded as the daemon records a
// chain's (in order; before an outcome that is not done, the followers
// behind it released, last first), with leases expiring and workers
// recording late: the queue's invariants hold at every step, no
// operation completes while an older one of its partition is
// unfinished, and a final drain leaves nothing unfinished.
func TestChainsKeepPartitionOrder(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s, clock := setup(t, Config{NoSync: true})
		entities := []string{"e1", "e2", "e3"}
		type flight struct {
			owner string
			ops   []Operation
		}
		var inFlight []flight
		nOwner := 0
		version := map[string]int64{}
		headOf := func(op Operation) uint64 {
			var seq uint64
			if err := s.db.View(func(tx *bolt.Tx) error {
				h, err := (&txw{tx: tx, s: s}).partitionHead(op.AccountID, op.EntityType, op.EntityID)
				if h != nil {
					seq = h.Seq
				}
				return err
			}); err != nil {
				rt.Fatal(err)
			}
			return seq
		}
		complete := func(owner string, op Operation) error {
			cur, err := s.GetOperation(op.ID)
			if err != nil && !errors.Is(err, ErrOperationNotFound) {
				rt.Fatal(err)
			}
			// A late worker's answer of an op that moved on changes
			// nothing; one the worker still holds must head it.
			if h := headOf(op); err == nil && cur.State == StateSending && cur.LeaseOwner == owner && h != op.Seq {
				rt.Fatalf("completing %s (seq %d) while seq %d heads its partition", op.ID, op.Seq, h)
			}
			version[op.EntityID]++
			_, err = s.Complete(ctx, op.ID, owner, Completion{ServerID: "s-" + op.EntityID, ServerVersion: version[op.EntityID]})
			return err
		}
		// A late worker's write finds its lease taken or the op moved on.
		lost := func(err error) bool {
			var te *TransitionError
			return err == nil || errors.Is(err, ErrLeaseLost) || errors.As(err, &te)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				id := rapid.SampledFrom(entities).Draw(rt, "entity")
				typ := rapid.SampledFrom([]OpType{OpCreate, OpUpdate, OpUpdate, OpUpdate, OpDelete}).Draw(rt, "op")
				s.Apply(ctx, Write{Op: typ, AccountID: "a", EntityType: "note", EntityID: id, Data: json.RawMessage(`{"x":1}`)})
			},
			"claim": func(rt *rapid.T) {
				nOwner++
				owner := fmt.Sprintf("w%d", nOwner)
				n := rapid.IntRange(1, 6).Draw(rt, "n")
				follow := rapid.IntRange(0, 4).Draw(rt, "follow")
				chains, err := s.ClaimChains(ctx, "a", owner, time.Minute, n, 1<<20, follow)
				if errors.Is(err, ErrNoReady) {
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				for _, c := range chains {
					inFlight = append(inFlight, flight{owner, c})
				}
			},
			"answer": func(rt *rapid.T) {
				if len(inFlight) == 0 {
					rt.Skip("nothing in flight")
				}
				i := rapid.IntRange(0, len(inFlight)-1).Draw(rt, "chain")
				f := inFlight[i]
				inFlight = slices.Delete(inFlight, i, i+1)
				// ops[:k] applied, ops[k] gets another outcome, the rest
				// were not run.
				k := rapid.IntRange(0, len(f.ops)).Draw(rt, "applied")
				for _, op := range f.ops[:k] {
					if err := complete(f.owner, op); !lost(err) {
						rt.Fatal(err)
					}
				}
				if k == len(f.ops) {
					return
				}
				for j := len(f.ops) - 1; j > k; j-- {
					if err := s.ReleaseUnsent(ctx, f.ops[j].ID, f.owner); !lost(err) {
						rt.Fatal(err)
					}
				}
				op := f.ops[k]
				var err error
				switch rapid.IntRange(0, 3).Draw(rt, "outcome") {
				case 0:
					err = s.RetryAt(ctx, op.ID, f.owner, clock.Now().Add(time.Second), "unavailable", "503", true)
				case 1:
					err = s.Fail(ctx, op.ID, f.owner, "validation", "400", false)
				case 2:
					err = s.ReleaseUnsent(ctx, op.ID, f.owner) // not run (424), or the daemon stopping
				case 3:
					err = s.Release(ctx, op.ID, f.owner, true)
				}
				if !lost(err) {
					rt.Fatal(err)
				}
			},
			"expire": func(rt *rapid.T) {
				clock.Advance(2 * time.Minute) // in-flight answers come late: their leases are lost
			},
			"": func(rt *rapid.T) {
				if err := s.Check(); err != nil {
					rt.Fatal(err)
				}
			},
		})
		// Drain: every failed op retried by the user, everything else
		// answered done, in chains.
		for range 1000 {
			clock.Advance(2 * time.Minute)
			failed, _, err := s.ListOperations(ListOptions{State: StatePermanentFailed, Limit: 100})
			if err != nil {
				rt.Fatal(err)
			}
			for _, op := range failed {
				if _, err := s.Retry(ctx, op.ID); err != nil {
					rt.Fatal(err)
				}
			}
			nOwner++
			owner := fmt.Sprintf("w%d", nOwner)
			chains, err := s.ClaimChains(ctx, "a", owner, time.Minute, 10, 1<<20, 4)
			if errors.Is(err, ErrNoReady) && len(failed) == 0 {
				break
			}
			if err != nil && !errors.Is(err, ErrNoReady) {
				rt.Fatal(err)
			}
			for _, c := range chains {
				for _, op := range c {
					if err := complete(owner, op); err != nil {
						rt.Fatal(err)
					}
				}
			}
		}
		st, err := s.Stats()
		if err != nil {
			rt.Fatal(err)
		}
		if n := st.Counts[StatePending] + st.Counts[StateSending] + st.Counts[StateRetryWaiting] + st.Counts[StatePermanentFailed]; n != 0 {
			rt.Fatalf("after the drain: %v", st.Counts)
		}
	})
}
