package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/clocktest"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"
)

// TestEventsMatchModel checks the change log (Events, LastEventSeq)
// against a model through random creates, updates, deletes and batches,
// claims and their outcomes (done, a retry later, a permanent failure, a
// decline, a release), the user's retries and discards, account purges,
// appended events, sweeps, time passing and restarts, some runs starting
// from the schema-5 file of testdata (its events one a row) and some
// from an empty one.
//
// Some batches are ordered (each member waits for the one before): once
// one was written, a step's events may also release the members that
// waited for its operation.
//
// A batch of up to maxEventGroup creates makes a commit of more events
// than a row holds.
//
// The model is the list of events each commit reported (OnCommit), and
// the oldest seq the sweeps keep. After each step:
//   - the step's events continue the log: consecutive seqs from the last
//     one on, none twice;
//   - they are the step's: a write's are about its entity and report its
//     new operation pending (or done: a delete the server need not see); a claim's, an answer's, a release's are
//     about that operation's entity and report its new state last; a
//     retry's and a discard's are about the operation's entity;
//     a purge's are about the account and end with account.purged; a
//     restart's return exactly the operations left sending to pending;
//   - Events(since, limit) for since values drawn around and inside the
//     log (in the middle of a write's events too) is exactly the model's
//     events after since from the oldest kept on, the first limit of
//     them, and its oldest is the oldest kept;
//   - each row of the log holds events of one commit only, and the
//     events of a commit of one write are in one row (up to
//     maxEventGroup);
//   - a sweep keeps exactly the last EventHistory events (as the log
//     stood when it began), every unfinished operation, and the done
//     ones completed within DoneRetention, and removes the older done
//     ones.
func TestEventsMatchModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		clock := clocktest.New()
		history := rapid.IntRange(3, 40).Draw(rt, "history")
		var (
			commits  [][]Event          // every commit's events, as OnCommit reported them
			log      []Event            // their concatenation: the model of the log
			keptFrom uint64             = 1
			stepFrom int                // commits before the step
			commitOf = map[uint64]int{} // event seq → its commit
		)
		cfg := Config{
			Now: clock.Now, NoSync: true, EventHistory: history, DoneRetention: time.Hour,
			Logger: slog.New(slog.DiscardHandler),
			OnCommit: func(evs []Event) {
				for _, e := range evs {
					commitOf[e.Seq] = len(commits)
				}
				commits = append(commits, slices.Clone(evs))
				log = append(log, evs...)
			},
		}
		var path string
		if rapid.Bool().Draw(rt, "schema5") {
			path, _ = openFixture(t, "schema5")
		} else {
			path = filepath.Join(t.TempDir(), "syncd.db")
		}
		s, err := Open(path, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { s.Close() }()
		// The events already in the file (the fixture's, Open's recovery
		// of it): the model starts with them.
		old, oldest, err := s.Events(0, 0)
		if err != nil {
			rt.Fatal(err)
		}
		if len(old) > 0 {
			keptFrom = oldest
			if len(log) > 0 {
				old = old[:len(old)-len(log)]
			}
			log = append(old, log...)
		}

		accounts := []string{"m1", "m2"}
		entities := []string{"a", "b", "c", "d"}
		var sending []Operation // claimed and not answered, as claimed
		bulk := 0               // entities the bulk batches created
		type done struct {
			at      time.Time
			account string
		}
		doneAt := map[string]done{} // operations answered done, until swept or purged

		stepEvents := func() []Event {
			var out []Event
			for _, c := range commits[stepFrom:] {
				out = append(out, c...)
			}
			return out
		}
		lastSeq := func() uint64 {
			if len(log) == 0 {
				return 0
			}
			return log[len(log)-1].Seq
		}
		// about checks that every event of evs is about the entity, and
		// that the last operation.state event of op has state st (a
		// claim of a retry that came due reports it pending first).
		// released reports whether e may be the release of a member of
		// an ordered batch that waited for the step's operation: its
		// operation.state, in the same account, no longer blocked.
		ordered := false // an ordered batch was written
		released := func(e Event, account string) bool {
			return ordered && e.AccountID == account && e.Type == EventOperationState && e.BlockedBy == ""
		}
		about := func(what string, evs []Event, account, typ, id, op string, st ...State) {
			var last State
			for _, e := range evs {
				if (e.AccountID != account || e.EntityType != typ || e.EntityID != id) && !released(e, account) {
					rt.Fatalf("%s: event %+v is not about %s/%s/%s", what, e, account, typ, id)
				}
				if e.Type == EventOperationState && e.OperationID == op {
					last = e.State
				}
			}
			if !slices.Contains(st, last) {
				rt.Fatalf("%s: operation %s ends in state %q in %+v, want one of %v", what, op, last, evs, st)
			}
		}
		// A write's operation is pending; a delete of an entity the
		// server never got (its create declined) is done at once.
		writeStates := []State{StatePending, StateDone}
		// dropSending forgets a claimed operation once answered.
		dropSending := func(id string) {
			sending = slices.DeleteFunc(sending, func(o Operation) bool { return o.ID == id })
		}
		pickEntity := func(rt *rapid.T) (account, typ, id string) {
			return rapid.SampledFrom(accounts).Draw(rt, "account"), "note", rapid.SampledFrom(entities).Draw(rt, "entity")
		}
		writeFor := func(rt *rapid.T, account, typ, id string) Write {
			w := Write{AccountID: account, EntityType: typ, EntityID: id, Data: json.RawMessage(fmt.Sprintf(`{"v":%d}`, rapid.IntRange(0, 99).Draw(rt, "v")))}
			e, err := s.GetEntity(account, typ, id)
			switch {
			case errors.Is(err, ErrEntityNotFound) || err == nil && e.Deleted:
				w.Op = OpCreate
			case err != nil:
				rt.Fatal(err)
			case rapid.IntRange(0, 3).Draw(rt, "delete?") == 0:
				w.Op, w.Data = OpDelete, nil
			default:
				w.Op = OpUpdate
			}
			return w
		}
		pickSending := func(rt *rapid.T) (Operation, bool) {
			if len(sending) == 0 {
				return Operation{}, false
			}
			return sending[rapid.IntRange(0, len(sending)-1).Draw(rt, "sending")], true
		}
		failed := func() []Operation {
			var out []Operation
			for _, a := range accounts {
				ops, _, err := s.ListOperations(ListOptions{Limit: MaxListLimit, State: StatePermanentFailed, AccountID: a})
				if err != nil {
					rt.Fatal(err)
				}
				out = append(out, ops...)
			}
			return out
		}

		check := func(rt *rapid.T, step string) {
			evs := stepEvents()
			// The step's events continue the log.
			want := lastSeq() - uint64(len(evs))
			for i, e := range evs {
				if e.Seq != want+uint64(i)+1 {
					rt.Fatalf("%s: event %d of the step has seq %d, want %d (%+v)", step, i, e.Seq, want+uint64(i)+1, evs)
				}
			}
			if n, err := s.LastEventSeq(); err != nil || n != lastSeq() {
				rt.Fatalf("%s: LastEventSeq %d (%v), the model's last %d", step, n, err, lastSeq())
			}
			// Rows hold one commit's events. Only the first row (a sweep
			// cuts it) and the step's can have changed.
			if err := s.db.View(func(tx *bolt.Tx) error {
				c := tx.Bucket(bucketEvents).Cursor()
				row := func(k, v []byte) error {
					first := readU64(k)
					last, err := lastEventSeq(first, v)
					if err != nil {
						return err
					}
					c, ok := commitOf[first]
					if !ok {
						return nil // the fixture's, or its recovery's
					}
					if lc := commitOf[last]; lc != c {
						return fmt.Errorf("the row %d..%d holds events of commits %d and %d", first, last, c, lc)
					}
					return nil
				}
				if k, v := c.First(); k != nil {
					if err := row(k, v); err != nil {
						return err
					}
				}
				if len(evs) == 0 {
					return nil
				}
				k, v := c.Seek(u64(evs[0].Seq))
				if k == nil || readU64(k) != evs[0].Seq {
					return fmt.Errorf("no row starts at the step's first event %d", evs[0].Seq)
				}
				for ; k != nil; k, v = c.Next() {
					if err := row(k, v); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				rt.Fatalf("%s: %v", step, err)
			}
			// Events(since, limit) against the model, for since values
			// across the log and limits drawn.
			kept := log[:0:0]
			for _, e := range log {
				if e.Seq >= keptFrom {
					kept = append(kept, e)
				}
			}
			wantOldest := uint64(0)
			if len(kept) > 0 {
				wantOldest = kept[0].Seq
			}
			for range 3 {
				since := rapid.Uint64Range(0, lastSeq()+2).Draw(rt, "since")
				limit := rapid.IntRange(0, 6).Draw(rt, "limit")
				got, oldest, err := s.Events(since, limit)
				if err != nil {
					rt.Fatalf("%s: Events(%d, %d): %v", step, since, limit, err)
				}
				var exp []Event
				for _, e := range kept {
					if e.Seq > since && (limit == 0 || len(exp) < limit) {
						exp = append(exp, e)
					}
				}
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(exp)
				if string(g) != string(w) || oldest != wantOldest {
					rt.Fatalf("%s: Events(%d, %d): oldest %d, want %d\n got %s\nwant %s", step, since, limit, oldest, wantOldest, g, w)
				}
			}
		}

		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				stepFrom = len(commits)
				account, typ, id := pickEntity(rt)
				w := writeFor(rt, account, typ, id)
				r, err := s.Apply(ctx, w)
				if err != nil {
					rt.Fatalf("apply %+v: %v", w, err)
				}
				evs := stepEvents()
				if len(commits)-stepFrom != 1 {
					rt.Fatalf("a write made %d commits", len(commits)-stepFrom)
				}
				about("write", evs, account, typ, id, r.Operation.ID, writeStates...)
				if len(evs) <= maxEventGroup {
					s.db.View(func(tx *bolt.Tx) error {
						v := tx.Bucket(bucketEvents).Get(u64(evs[0].Seq))
						if last, err := lastEventSeq(evs[0].Seq, v); v == nil || err != nil || last != evs[len(evs)-1].Seq {
							rt.Fatalf("the write's %d events (from %d) are not one row", len(evs), evs[0].Seq)
						}
						return nil
					})
				}
				check(rt, "write")
			},
			"batch": func(rt *rapid.T) {
				stepFrom = len(commits)
				account := rapid.SampledFrom(accounts).Draw(rt, "account")
				ids := rapid.SliceOfNDistinct(rapid.SampledFrom(entities), 2, len(entities), rapid.ID[string]).Draw(rt, "entities")
				var ws []Write
				for _, id := range ids {
					ws = append(ws, writeFor(rt, account, "note", id))
				}
				// An ordered batch: each member waits for the one before.
				inOrder := rapid.IntRange(0, 3).Draw(rt, "ordered?") == 0
				ordered = ordered || inOrder
				rs, err := s.ApplyBatch(ctx, ws, inOrder)
				if err != nil {
					rt.Fatalf("batch %+v: %v", ws, err)
				}
				// Each write's events are consecutive, in the batch's order;
				// among them may be the release of an ordered member that
				// waited for what the write dropped (a delete over a
				// declined create), about another entity, maybe one a later
				// write of the batch is about: told apart by its operation.
				evs := stepEvents()
				mine := map[string]bool{}
				for _, r := range rs {
					mine[r.Operation.ID] = true
				}
				// A release is of an operation that waited (its last
				// event before the step was blocked) and is pending
				// again (releaseWaiters reports no other state).
				blocked := map[string]bool{}
				for _, e := range log[:len(log)-len(evs)] {
					if e.Type == EventOperationState {
						blocked[e.OperationID] = e.BlockedBy != ""
					}
				}
				releaseOf := func(e Event) bool {
					return released(e, account) && blocked[e.OperationID] && (e.State == StatePending || e.State == StateRetryWaiting)
				}
				i := 0
				for j, r := range rs {
					start := i
					for i < len(evs) {
						e := evs[i]
						ours := e.EntityID == ws[j].EntityID && (!mine[e.OperationID] || e.OperationID == r.Operation.ID)
						if !ours && (mine[e.OperationID] || !releaseOf(e)) {
							break
						}
						i++
					}
					about(fmt.Sprintf("batch write %d", j), evs[start:i], account, "note", ws[j].EntityID, r.Operation.ID, writeStates...)
				}
				if i != len(evs) {
					rt.Fatalf("batch: events past its writes' %+v", evs[i:])
				}
				check(rt, "batch")
			},
			"bulk": func(rt *rapid.T) {
				// A commit of more events than a row holds
				// (maxEventGroup): its rows split inside it.
				stepFrom = len(commits)
				account := rapid.SampledFrom(accounts).Draw(rt, "account")
				n := rapid.IntRange(maxEventGroup/4, maxEventGroup).Draw(rt, "creates")
				var ws []Write
				for range n {
					bulk++
					ws = append(ws, Write{Op: OpCreate, AccountID: account, EntityType: "bulk", EntityID: fmt.Sprintf("k%d", bulk), Data: json.RawMessage(`{"k":1}`)})
				}
				if _, err := s.ApplyBatch(ctx, ws, false); err != nil {
					rt.Fatal(err)
				}
				if len(commits)-stepFrom != 1 || len(stepEvents()) < 2*n {
					rt.Fatalf("a batch of %d creates: %d commits, %d events", n, len(commits)-stepFrom, len(stepEvents()))
				}
				check(rt, "bulk")
			},
			"claim": func(rt *rapid.T) {
				stepFrom = len(commits)
				account := rapid.SampledFrom(accounts).Draw(rt, "account")
				op, err := s.Claim(ctx, account, "w", 365*24*time.Hour)
				if errors.Is(err, ErrNoReady) {
					if len(stepEvents()) != 0 {
						rt.Fatalf("a claim of nothing wrote %+v", stepEvents())
					}
					check(rt, "claim of nothing")
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				sending = append(sending, op)
				about("claim", stepEvents(), op.AccountID, op.EntityType, op.EntityID, op.ID, StateSending)
				check(rt, "claim")
			},
			"answer": func(rt *rapid.T) {
				op, ok := pickSending(rt)
				if !ok {
					rt.Skip("nothing sending")
				}
				stepFrom = len(commits)
				var st State
				var err error
				switch rapid.IntRange(0, 4).Draw(rt, "outcome") {
				case 0, 1:
					st = StateDone
					_, err = s.Complete(ctx, op.ID, "w", Completion{ServerID: "srv-" + op.EntityID})
					doneAt[op.ID] = done{clock.Now(), op.AccountID}
				case 2:
					st = StateRetryWaiting
					err = s.RetryAt(ctx, op.ID, "w", clock.Now().Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "retry in"))*time.Minute), "network", "reset", true)
				case 3:
					st = StatePermanentFailed
					err = s.Fail(ctx, op.ID, "w", "server", "no", rapid.Bool().Draw(rt, "maybe applied"))
				case 4:
					st = StatePermanentFailed
					err = s.Decline(ctx, op.ID, "w", "validation", "no")
				}
				if err != nil {
					rt.Fatalf("answer %s: %v", op.ID, err)
				}
				dropSending(op.ID)
				about("answer", stepEvents(), op.AccountID, op.EntityType, op.EntityID, op.ID, st)
				check(rt, "answer")
			},
			"release": func(rt *rapid.T) {
				op, ok := pickSending(rt)
				if !ok {
					rt.Skip("nothing sending")
				}
				stepFrom = len(commits)
				if err := s.ReleaseUnsent(ctx, op.ID, "w"); err != nil {
					rt.Fatal(err)
				}
				dropSending(op.ID)
				about("release", stepEvents(), op.AccountID, op.EntityType, op.EntityID, op.ID, StatePending)
				check(rt, "release")
			},
			"retry": func(rt *rapid.T) {
				fs := failed()
				if len(fs) == 0 {
					rt.Skip("nothing failed")
				}
				op := rapid.SampledFrom(fs).Draw(rt, "failed")
				stepFrom = len(commits)
				if _, err := s.Retry(ctx, op.ID); err != nil {
					rt.Fatal(err)
				}
				for _, e := range stepEvents() {
					if (e.AccountID != op.AccountID || e.EntityID != op.EntityID) && !released(e, op.AccountID) {
						rt.Fatalf("retry of %s: event %+v", op.ID, e)
					}
				}
				if len(stepEvents()) == 0 {
					rt.Fatal("a retry wrote no event")
				}
				check(rt, "retry")
			},
			"discard": func(rt *rapid.T) {
				fs := failed()
				if len(fs) == 0 {
					rt.Skip("nothing failed")
				}
				op := rapid.SampledFrom(fs).Draw(rt, "failed")
				stepFrom = len(commits)
				if err := s.Discard(ctx, op.ID); err != nil {
					rt.Fatal(err)
				}
				purged := false
				for _, e := range stepEvents() {
					if (e.AccountID != op.AccountID || e.EntityID != op.EntityID) && !released(e, op.AccountID) {
						rt.Fatalf("discard of %s: event %+v", op.ID, e)
					}
					purged = purged || e.Type == EventOperationPurged && e.OperationID == op.ID
				}
				if !purged {
					rt.Fatalf("discard of %s: no operation.purged in %+v", op.ID, stepEvents())
				}
				check(rt, "discard")
			},
			"purge": func(rt *rapid.T) {
				account := rapid.SampledFrom(accounts).Draw(rt, "account")
				stepFrom = len(commits)
				if _, err := s.PurgeAccount(ctx, account, true); err != nil {
					rt.Fatal(err)
				}
				evs := stepEvents()
				for _, e := range evs {
					if e.AccountID != account {
						rt.Fatalf("purge of %s: event %+v", account, e)
					}
				}
				if len(evs) == 0 || evs[len(evs)-1].Type != EventAccountPurged {
					rt.Fatalf("purge of %s: events %+v", account, evs)
				}
				sending = slices.DeleteFunc(sending, func(o Operation) bool { return o.AccountID == account })
				maps.DeleteFunc(doneAt, func(_ string, d done) bool { return d.account == account })
				check(rt, "purge")
			},
			"event": func(rt *rapid.T) {
				stepFrom = len(commits)
				e, err := s.AppendEvent(ctx, Event{Type: "connectivity.changed", Data: json.RawMessage(`{"online":true}`)})
				if err != nil {
					rt.Fatal(err)
				}
				if evs := stepEvents(); len(evs) != 1 || evs[0].Seq != e.Seq {
					rt.Fatalf("appended %+v, reported %+v", e, evs)
				}
				check(rt, "event")
			},
			"time": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.IntRange(1, 90).Draw(rt, "minutes")) * time.Minute)
			},
			"sweep": func(rt *rapid.T) {
				stepFrom = len(commits)
				last := lastSeq()
				now := clock.Now()
				if _, _, err := s.Sweep(ctx); err != nil {
					rt.Fatal(err)
				}
				if len(stepEvents()) != 0 {
					rt.Fatalf("the sweep wrote events %+v", stepEvents())
				}
				if last > uint64(history) {
					keptFrom = max(keptFrom, last-uint64(history)+1)
				}
				// Done operations go after DoneRetention, the rest stay; so
				// does a done member of an ordered batch that later ones
				// still wait through (After set), until released.
				for id, d := range doneAt {
					at := d.at
					op, err := s.GetOperation(id)
					switch {
					case errors.Is(err, ErrOperationNotFound) && at.Before(now.Add(-time.Hour)):
						delete(doneAt, id)
					case errors.Is(err, ErrOperationNotFound):
						rt.Fatalf("the sweep removed %s, done at %v, now %v", id, at, now)
					case err != nil:
						rt.Fatal(err)
					case at.Before(now.Add(-time.Hour)) && op.After == "":
						rt.Fatalf("the sweep kept %s, done at %v, now %v", id, at, now)
					}
				}
				for _, a := range accounts {
					ops, _, err := s.ListOperations(ListOptions{Limit: MaxListLimit, AccountID: a})
					if err != nil {
						rt.Fatal(err)
					}
					for _, op := range ops {
						if op.State == StateDone && op.CompletedAt.Before(now.Add(-time.Hour)) && op.After == "" {
							rt.Fatalf("the sweep kept %s, done at %v", op.ID, op.CompletedAt)
						}
					}
				}
				check(rt, "sweep")
			},
			"restart": func(rt *rapid.T) {
				if err := s.Close(); err != nil {
					rt.Fatal(err)
				}
				stepFrom = len(commits)
				if s, err = Open(path, cfg); err != nil {
					rt.Fatal(err)
				}
				// Open returns the operations left sending to pending:
				// one operation.state each, nothing else.
				var got []string
				for _, e := range stepEvents() {
					if e.Type == EventOperationState && e.State == StatePending {
						got = append(got, e.OperationID)
					} else if e.Type != EventEntityChanged {
						rt.Fatalf("restart: event %+v", e)
					}
				}
				var want []string
				for _, o := range sending {
					want = append(want, o.ID)
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					rt.Fatalf("restart returned %v to pending, %v were sending", got, want)
				}
				sending = nil
				check(rt, "restart")
			},
		})
		// The invariants once, at the end: after every step they took a
		// quarter of the test's time.
		if err := s.Check(); err != nil {
			rt.Fatal(err)
		}
	})
}
