package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The model: what Claim must return, computed by brute force over a plain
// list of operations, against the store's indexes.

type modelOp struct {
	id, account, partition string
	typ                    OpType
	seq                    int
	state                  State
	nextAt, leaseExp       time.Time
	owner                  string
	claimed, declined      bool
	maybe                  bool   // MaybeApplied
	key                    string // the key the store last showed
	renewed                bool   // a new key is due since then
}

type modelEntity struct {
	deleted, serverID bool
	synced            bool // syncedOperationId is set (every payload is the same data)
}

type model struct {
	ops      []*modelOp
	entities map[string]*modelEntity // partition → entity
	seq      int
}

func (m *model) unfinished(partition string) []*modelOp {
	var out []*modelOp
	for _, op := range m.ops {
		if op.partition == partition && op.state != StateDone {
			out = append(out, op)
		}
	}
	return out
}

// claimable is the brute-force answer: the ready head with the smallest
// (next_attempt_at, seq), else the expired lease with the smallest
// (lease_expires_at, seq).
func (m *model) claimable(account string, now time.Time) *modelOp {
	var ready, expired []*modelOp
	for _, op := range m.ops {
		if op.account != account || op.state == StateDone {
			continue
		}
		if m.unfinished(op.partition)[0] != op {
			continue
		}
		switch op.state {
		case StatePending, StateRetryWaiting:
			if !op.nextAt.After(now) {
				ready = append(ready, op)
			}
		case StateSending:
			if !op.leaseExp.After(now) {
				expired = append(expired, op)
			}
		}
	}
	by := func(t func(*modelOp) time.Time) func(a, b *modelOp) int {
		return func(a, b *modelOp) int {
			if c := t(a).Compare(t(b)); c != 0 {
				return c
			}
			return a.seq - b.seq
		}
	}
	if len(ready) > 0 {
		return slices.MinFunc(ready, by(func(o *modelOp) time.Time { return o.nextAt }))
	}
	if len(expired) > 0 {
		return slices.MinFunc(expired, by(func(o *modelOp) time.Time { return o.leaseExp }))
	}
	return nil
}

func (m *model) remove(op *modelOp) {
	m.ops = slices.DeleteFunc(m.ops, func(o *modelOp) bool { return o == op })
}

// afterFinish drops the entity of a partition whose delete is done.
func (m *model) settle(partition string) {
	e := m.entities[partition]
	if e != nil && e.deleted && len(m.unfinished(partition)) == 0 {
		delete(m.entities, partition)
	}
}

func TestClaimMatchesModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		mergeable := rapid.Bool().Draw(rt, "mergeable")
		cfg := Config{NoSync: true}
		if mergeable {
			cfg.MergeableTypes = []string{"note"}
		}
		s, clock := setup(t, cfg)
		m := &model{entities: map[string]*modelEntity{}}
		accounts := []string{"a1", "a2"}
		ids := []string{"e1", "e2", "e3", "e4"}
		owners := []string{"w1", "w2"}
		leases := []time.Duration{time.Second, 5 * time.Second, time.Minute}

		sending := func() []*modelOp {
			var out []*modelOp
			for _, op := range m.ops {
				if op.state == StateSending {
					out = append(out, op)
				}
			}
			return out
		}

		rt.Repeat(map[string]func(*rapid.T){
			"write": func(rt *rapid.T) {
				acct := rapid.SampledFrom(accounts).Draw(rt, "account")
				id := rapid.SampledFrom(ids).Draw(rt, "entity")
				typ := rapid.SampledFrom([]OpType{OpCreate, OpUpdate, OpDelete}).Draw(rt, "op")
				p := partitionKey(acct, "note", id)
				e := m.entities[p]
				r, err := s.Apply(ctx, Write{Op: typ, AccountID: acct, EntityType: "note", EntityID: id, Data: json.RawMessage(`{"x":1}`)})
				wantErr := typ == OpCreate && e != nil && !e.deleted || typ != OpCreate && (e == nil || e.deleted)
				if wantErr != (err != nil) {
					rt.Fatalf("%s %s: err = %v, model expects error = %v", typ, p, err, wantErr)
				}
				if err != nil {
					return
				}
				m.seq++
				op := &modelOp{id: r.Operation.ID, account: acct, partition: p, typ: typ, seq: m.seq, state: StatePending, nextAt: clock.Now()}
				if u := m.unfinished(p); typ == OpDelete && len(u) > 0 && u[0].state == StatePermanentFailed && u[0].declined {
					// A delete over a declined head drops the partition,
					// none of which reached the server; over a create of
					// an id the server never answered for, it is done.
					for _, o := range u {
						m.remove(o)
					}
					if u[0].typ == OpCreate && !e.serverID {
						op.state = StateDone
						delete(m.entities, p)
					} else {
						e.deleted = true
					}
					m.ops = append(m.ops, op)
					return
				}
				if u := m.unfinished(p); typ == OpCreate && len(u) > 0 && u[0].state == StatePermanentFailed && u[0].declined && u[0].typ == OpDelete {
					// A create over a declined delete supersedes it (it
					// never reached the server): an update of the record
					// the server still holds, when it has one.
					m.remove(u[0])
					if e.serverID {
						op.typ = OpUpdate
					}
				}
				if u := m.unfinished(p); mergeable && typ != OpCreate && len(u) > 0 {
					// An update or delete supersedes an unsent update.
					if tail := u[len(u)-1]; tail.typ == OpUpdate && tail.state == StatePending && !tail.claimed {
						tail.state = StateDone
					}
				}
				if typ == OpUpdate {
					// An update releases a declined head that is no delete.
					if u := m.unfinished(p); len(u) > 0 && u[0].state == StatePermanentFailed && u[0].declined && u[0].typ != OpDelete {
						u[0].state, u[0].nextAt, u[0].declined, u[0].maybe, u[0].renewed = StatePending, clock.Now(), false, false, true
						// A renewed update carries the entity's current
						// data: the updates queued behind it, all never
						// sent, go done with it (foldInto).
						fold := u[0].typ == OpUpdate
						for _, o := range u[1:] {
							fold = fold && o.typ == OpUpdate && o.state == StatePending && !o.claimed
						}
						if fold {
							for _, o := range u[1:] {
								o.state = StateDone
							}
						}
					}
				}
				if typ == OpCreate {
					// Made again over a deleted row: it keeps its server
					// id and what it knew the server held.
					m.entities[p] = &modelEntity{serverID: e != nil && e.serverID, synced: e != nil && e.synced}
				}
				if typ == OpDelete {
					e.deleted = true
				}
				m.ops = append(m.ops, op)
			},
			"claim": func(rt *rapid.T) {
				acct := rapid.SampledFrom(accounts).Draw(rt, "account")
				owner := rapid.SampledFrom(owners).Draw(rt, "owner")
				lease := rapid.SampledFrom(leases).Draw(rt, "lease")
				want := m.claimable(acct, clock.Now())
				got, err := s.Claim(ctx, acct, owner, lease)
				if want == nil {
					if !errors.Is(err, ErrNoReady) {
						rt.Fatalf("claim(%s) = %s, %v; model: nothing ready", acct, got.ID, err)
					}
					return
				}
				if err != nil || got.ID != want.id {
					rt.Fatalf("claim(%s) = %q, %v; model: %s", acct, got.ID, err, want.id)
				}
				if want.state == StateSending { // an expired lease: the lost send may have gone out
					want.maybe = true
				}
				want.state, want.owner, want.leaseExp, want.claimed = StateSending, owner, clock.Now().Add(lease), true
			},
			"outcome": func(rt *rapid.T) {
				live := sending()
				if len(live) == 0 {
					rt.Skip("nothing sending")
				}
				op := rapid.SampledFrom(live).Draw(rt, "op")
				switch rapid.IntRange(0, 4).Draw(rt, "outcome") {
				case 0:
					if _, err := s.Complete(ctx, op.id, op.owner, Completion{ServerID: "srv"}); err != nil {
						rt.Fatal(err)
					}
					op.state = StateDone
					if e := m.entities[op.partition]; e != nil {
						e.serverID, e.synced = true, op.typ != OpDelete
					}
					m.settle(op.partition)
				case 1:
					at := clock.Now().Add(time.Duration(rapid.IntRange(0, 10).Draw(rt, "delay")) * time.Second)
					maybe := rapid.Bool().Draw(rt, "maybeApplied")
					if err := s.RetryAt(ctx, op.id, op.owner, at, "network", "x", maybe); err != nil {
						rt.Fatal(err)
					}
					op.maybe = op.maybe || maybe
					op.state, op.nextAt = StateRetryWaiting, at
				case 2:
					maybe := rapid.Bool().Draw(rt, "maybeApplied")
					if err := s.Fail(ctx, op.id, op.owner, "validation", "x", maybe); err != nil {
						rt.Fatal(err)
					}
					op.state, op.maybe = StatePermanentFailed, op.maybe || maybe
				case 4:
					if err := s.Decline(ctx, op.id, op.owner, "validation", "x"); err != nil {
						rt.Fatal(err)
					}
					op.state, op.declined, op.maybe = StatePermanentFailed, true, false
				case 3:
					maybe := rapid.Bool().Draw(rt, "maybeApplied")
					if err := s.Release(ctx, op.id, op.owner, maybe); err != nil {
						rt.Fatal(err)
					}
					op.maybe = op.maybe || maybe
					op.state, op.nextAt = StatePending, clock.Now()
				}
			},
			"user": func(rt *rapid.T) {
				var failed []*modelOp
				for _, op := range m.ops {
					if op.state == StatePermanentFailed {
						failed = append(failed, op)
					}
				}
				if len(failed) == 0 {
					rt.Skip("nothing failed")
				}
				op := rapid.SampledFrom(failed).Draw(rt, "op")
				if rapid.Bool().Draw(rt, "retry") {
					if _, err := s.Retry(ctx, op.id); err != nil {
						rt.Fatal(err)
					}
					if op.declined { // a new key
						op.maybe, op.renewed = false, true
					}
					op.state, op.nextAt, op.declined = StatePending, clock.Now(), false
					return
				}
				if err := s.Discard(ctx, op.id); err != nil {
					rt.Fatal(err)
				}
				if op.typ == OpCreate {
					// Up to a later create of the same id, which stays.
					for i, o := range m.unfinished(op.partition) {
						if i > 0 && o.typ == OpCreate {
							return
						}
						m.remove(o)
					}
					delete(m.entities, op.partition)
					return
				}
				m.remove(op)
				e := m.entities[op.partition]
				if !op.declined {
					e.synced = false // the server may hold its effect
				}
				if op.typ == OpDelete {
					e.deleted = false
					next := m.unfinished(op.partition)
					// A create made again behind it, never sent, becomes
					// an update of the entity the server still holds.
					if op.declined && len(next) > 0 && next[0].typ == OpCreate && !next[0].claimed && e.serverID {
						next[0].typ = OpUpdate
					}
					// With nothing queued behind it, the entity's data
					// goes as an update unless the server holds it.
					if op.declined && len(next) == 0 && !e.synced {
						row, err := s.EntityRow(op.account, "note", strings.TrimPrefix(op.partition, op.account+"\x00note\x00"))
						if err != nil {
							rt.Fatal(err)
						}
						m.seq++
						m.ops = append(m.ops, &modelOp{id: row.LastOperationID, account: op.account, partition: op.partition, typ: OpUpdate, seq: m.seq, state: StatePending, nextAt: clock.Now()})
					}
				}
				m.settle(op.partition)
			},
			"tick": func(rt *rapid.T) {
				clock.Advance(time.Duration(rapid.IntRange(1, 20).Draw(rt, "seconds")) * time.Second)
			},
			"": func(rt *rapid.T) {
				if err := s.Check(); err != nil {
					rt.Fatal(err)
				}
				for _, op := range m.ops {
					got, err := s.GetOperation(op.id)
					if err != nil || got.State != op.state || got.Type != op.typ || got.Declined != op.declined || got.MaybeApplied != op.maybe {
						rt.Fatalf("op %s: store %s %s declined=%v maybe=%v %v, model %s %s declined=%v maybe=%v", op.id, got.Type, got.State, got.Declined, got.MaybeApplied, err, op.typ, op.state, op.declined, op.maybe)
					}
					// The key: the id until a renewal, then a new one each
					// time, and unchanged otherwise.
					switch want := cmp.Or(op.key, op.id); {
					case op.renewed && (got.Key() == want || got.Key() == op.id):
						rt.Fatalf("op %s: key %q after a renewal, as before", op.id, got.Key())
					case !op.renewed && got.Key() != want:
						rt.Fatalf("op %s: key %q, want %q", op.id, got.Key(), want)
					}
					op.key, op.renewed = got.Key(), false
				}
			},
		})
	})
}
