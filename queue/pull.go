package queue

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syncd/syncd/idempotency/fieldmerge"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	bolt "go.etcd.io/bbolt"
)

// Pulling: the server's changes come down into the same file, page by
// page. Each page is applied in one transaction with the cursor that
// follows it, so a crash redoes the page, and applying is idempotent by
// version. The rules (DESIGN.md Part 2, docs/engine.md):
//
//   - no local entity: insert it synced, with the server's id and
//     version (a deleted record of an absent entity does nothing);
//   - a local entity without unfinished operations and older than the
//     change: take the server's data, or remove it locally, synced;
//   - a local entity WITH unfinished operations: keep the local data
//     (the user's pending intent wins locally) and remember the server's
//     record in Entity.Server; the pending operation goes out with the
//     version its change was made on as baseVersion, and the server's
//     answer decides;
//   - a change at or below the version the entity is based on: skip it
//     (an echo of this device's own write, or a page read again).
//
// A full pass (a read from the beginning: a new device, or again after
// the server said the cursor expired) marks what it sees; at its end,
// entities of the account that are synced and were not seen are removed
// (the server no longer holds them). Entities with unfinished local
// operations are never removed by a pull.

// Change is one record of the server's changes feed, at its latest
// version.
type Change struct {
	EntityType string
	EntityID   string // the local id: the server's clientId
	ServerID   string
	Version    int64
	Deleted    bool
	Data       json.RawMessage // absent when Deleted
	// OperationID is the key of the write that made this version, when
	// the server knows it.
	OperationID string
}

// PullState is an account's place in the changes feed.
type PullState struct {
	// Cursor is where the next page starts; empty: the beginning.
	Cursor string `json:"cursor,omitempty"`
	// FullPass is set while a read from the beginning is under way: its
	// end removes the synced entities it did not see.
	FullPass bool `json:"fullPass,omitempty"`
	// Received counts the changes applied since the account's pulls
	// began; Seen counts the records of the current full pass.
	Received int64 `json:"received,omitempty"`
	Seen     int64 `json:"seen,omitempty"`
	// LastPullAt is when the last page was applied.
	LastPullAt time.Time `json:"lastPullAt,omitzero"`
	// Bootstrapped is set once a full pass has ended: an empty cursor
	// after it is the server's own (it had nothing), not a pass to make.
	Bootstrapped bool `json:"bootstrapped,omitempty"`
}

// PageResult is what ApplyChanges did.
type PageResult struct {
	// Applied counts changes taken into local entities (inserted,
	// updated or removed); Kept, changes remembered beside an entity
	// with local changes; Skipped, changes at or below what the entity
	// holds, and changes whose type or id this store cannot hold.
	Applied, Kept, Skipped int
	// Removed counts synced entities a full pass ended without seeing.
	Removed int
}

// seenMark is the value of a full pass's marks.
var seenMark = []byte{1}

// Event data of entity events a pull makes: {"origin":"remote"}.
var originRemote = json.RawMessage(`{"origin":"remote"}`)

func pullKey(account string) []byte     { return append([]byte("pull\x00"), account...) }
func pullSeenKey(account string) []byte { return append([]byte("pullseen\x00"), account...) }

// LoadPullState returns account's place in the feed.
func (s *Store) LoadPullState(account string) (PullState, error) {
	var st PullState
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(pullKey(account))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &st)
	})
	if err != nil {
		return st, fmt.Errorf("queue: load pull state: %w", err)
	}
	return st, nil
}

func (tx *txw) savePullState(account string, st PullState) error {
	v, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return tx.put(tx.b(bucketMeta), pullKey(account), v)
}

// RestartPull starts a full pass for account: the next page is read from
// the beginning, and the pass's end removes what it did not see. The
// daemon calls it when the server answers that the cursor expired.
func (s *Store) RestartPull(ctx context.Context, account string) error {
	return s.update(ctx, func(tx *txw) error {
		st, err := tx.pullState(account)
		if err != nil {
			return err
		}
		st.Cursor = ""
		return tx.beginPass(account, st)
	})
}

// BeginFullPass starts the full pass of an account that has no cursor
// yet (a first sign-in), if it has not begun. The daemon calls it before
// it reads the first page: from then on, an entity this device's own
// write puts on the server counts as seen by the pass, so the pass's end
// does not remove it for having been pushed after the pages were read.
func (s *Store) BeginFullPass(ctx context.Context, account string) error {
	return s.update(ctx, func(tx *txw) error {
		st, err := tx.pullState(account)
		if err != nil || st.FullPass || st.Cursor != "" || st.Bootstrapped {
			return err
		}
		return tx.beginPass(account, st)
	})
}

func (tx *txw) beginPass(account string, st PullState) error {
	if err := tx.clearSeen(account); err != nil {
		return err
	}
	if _, err := tx.seenBucket(account, true); err != nil {
		return err
	}
	st.FullPass, st.Seen = true, 0
	return tx.savePullState(account, st)
}

// markSeen records, during a full pass, that the server holds an entity
// (this device's write of it was just applied there).
func (tx *txw) markSeen(account, entityType, id string) error {
	seen, err := tx.seenBucket(account, false)
	if seen == nil || err != nil {
		return err
	}
	return tx.put(seen, entityKey(account, entityType, id), []byte{1})
}

func (tx *txw) pullState(account string) (PullState, error) {
	var st PullState
	if v := tx.b(bucketMeta).Get(pullKey(account)); v != nil {
		if err := json.Unmarshal(v, &st); err != nil {
			return st, fmt.Errorf("queue: pull state of %q: %w", account, err)
		}
	}
	return st, nil
}

// seenBucket is the set of entity keys a full pass has seen, one
// sub-bucket of the meta bucket per account.
func (tx *txw) seenBucket(account string, create bool) (*bolt.Bucket, error) {
	meta := tx.b(bucketMeta)
	b := meta.Bucket(pullSeenKey(account))
	if b == nil && create {
		tx.wrote = true
		return meta.CreateBucket(pullSeenKey(account))
	}
	return b, nil
}

func (tx *txw) clearSeen(account string) error {
	if tx.b(bucketMeta).Bucket(pullSeenKey(account)) == nil {
		return nil
	}
	tx.wrote = true
	return tx.b(bucketMeta).DeleteBucket(pullSeenKey(account))
}

// ApplyChanges applies one page of account's feed and saves cursor as
// where the next page starts, in one transaction. last says that the
// page is the last one the server has now (hasMore false): a full pass
// then ends. The page read from an empty cursor starts a full pass.
func (s *Store) ApplyChanges(ctx context.Context, account string, after string, changes []Change, cursor string, last bool) (PageResult, error) {
	var res PageResult
	err := s.update(ctx, func(tx *txw) error {
		res = PageResult{}
		if tx.b(bucketMeta).Get(purgeKey(account)) != nil {
			return fmt.Errorf("%w: %s", ErrPurging, account)
		}
		st, err := tx.pullState(account)
		if err != nil {
			return err
		}
		if st.Cursor != after {
			// Another page was applied since this one was asked for (two
			// pullers would be a bug; a restart of the pass is not):
			// nothing of it is taken.
			return fmt.Errorf("%w: the pull cursor moved from %q to %q", ErrPullCursorMoved, after, st.Cursor)
		}
		if after == "" && !st.FullPass && !st.Bootstrapped {
			if err := tx.beginPass(account, st); err != nil {
				return err
			}
			st.FullPass, st.Seen = true, 0
		}
		var seen *bolt.Bucket // looked up once a page, not once a change
		if st.FullPass {
			if seen, err = tx.seenBucket(account, true); err != nil {
				return err
			}
		}
		for i := range changes {
			if err := tx.applyChangeIn(account, &changes[i], seen, false, &res); err != nil {
				return err
			}
		}
		st.Received += int64(res.Applied + res.Kept + res.Skipped)
		if st.FullPass {
			st.Seen += int64(len(changes))
		}
		if cursor != "" {
			st.Cursor = cursor
		}
		st.LastPullAt = tx.now
		if st.FullPass && last {
			n, err := tx.endFullPass(account)
			if err != nil {
				return err
			}
			res.Removed = n
			st.FullPass, st.Seen, st.Bootstrapped = false, 0, true
		}
		return tx.savePullState(account, st)
	})
	return res, err
}

// ErrPullCursorMoved: ApplyChanges was given a page read after another
// cursor than the one stored.
var ErrPullCursorMoved = errors.New("queue: pull cursor moved")

// applyChange applies one change of the feed, or with force set the
// record a refresh read (taken unless older than what the entity knows:
// the same version as known replaces local data the server may not hold).
func (tx *txw) applyChange(account string, c *Change, fullPass, force bool, res *PageResult) error {
	var seen *bolt.Bucket
	if fullPass {
		var err error
		if seen, err = tx.seenBucket(account, true); err != nil {
			return err
		}
	}
	return tx.applyChangeIn(account, c, seen, force, res)
}

// applyChangeIn is applyChange with the full pass's seen bucket (nil
// outside a full pass).
func (tx *txw) applyChangeIn(account string, c *Change, seen *bolt.Bucket, force bool, res *PageResult) error {
	// What an app could not write, a pull does not store either: a bad
	// type or id, data that is not one object, or JSON that readers take
	// in different ways.
	if ValidateEntityType(c.EntityType) != nil || ValidateEntityID(c.EntityID) != nil || c.Version <= 0 ||
		(!c.Deleted && len(c.Data) <= tx.s.cfg.MaxDataBytes && (len(c.Data) == 0 || c.Data[0] != '{' ||
			jsonstrict.Check(c.Data, MaxDataDepth) != nil)) {
		res.Skipped++
		tx.s.cfg.Logger.Warn("queue: pulled change skipped: this store cannot hold it",
			"type", c.EntityType, "id", c.EntityID, "version", c.Version)
		return nil
	}
	// Data over this device's limit is not stored, and not skipped
	// either: the entity turns stale (StaleTooLarge), so the app sees
	// that the server holds a version this device does not.
	missing := ""
	if !c.Deleted {
		// Stored data is canonical JSON, as an app's write makes it
		// (written in one walk: pullcanon.go).
		data, err := []byte(nil), error(nil)
		if len(c.Data) <= tx.s.cfg.MaxDataBytes {
			data, err = canonicalPulled(c.Data)
			if err != nil {
				res.Skipped++
				return nil
			}
		}
		if len(c.Data) > tx.s.cfg.MaxDataBytes || len(data) > tx.s.cfg.MaxDataBytes {
			missing, data = StaleTooLarge, nil
			tx.s.cfg.Logger.Warn("queue: pulled change over this device's data limit: the entity is stale until the limit is raised and it is refreshed",
				"type", c.EntityType, "id", c.EntityID, "version", c.Version, "bytes", len(c.Data), "limit", tx.s.cfg.MaxDataBytes)
		}
		c.Data = data
	}
	k := entityKey(account, c.EntityType, c.EntityID) // bbolt copies the keys it keeps
	if seen != nil {
		// Not an empty value: bbolt's Get answers nil for one.
		if err := tx.put(seen, k, seenMark); err != nil {
			return err
		}
	}
	ents := tx.b(bucketEntities)
	var e *Entity
	if v := ents.Get(k); v != nil {
		var err error
		if e, _, err = decodeEntityRow(k, v, false); err != nil {
			return err
		}
	}
	if e == nil {
		if c.Deleted {
			res.Skipped++
			return nil
		}
		e = &Entity{AccountID: account, Type: c.EntityType, ID: c.EntityID, Data: c.Data,
			SyncState: SyncSynced, ServerID: c.ServerID, ServerVersion: c.Version,
			Version: 1, CreatedAt: tx.now, UpdatedAt: tx.now}
		if missing != "" {
			// Known to exist, its data not held here: data null, stale.
			e.Server = &ServerState{Version: c.Version, Missing: missing}
			e.SyncState, e.SyncCode, e.SyncError = SyncStale, missing, staleError(e.Server)
		}
		// A new row (saveEntity would look for the old one again): no
		// operation has its data as payload.
		if err := tx.put(ents, k, encodeEntity(e, nil)); err != nil {
			return err
		}
		res.Applied++
		return tx.remoteEvent(e, EventEntityChanged)
	}
	srv := ServerState{ID: c.ServerID, Version: c.Version, Deleted: c.Deleted, Data: c.Data, Missing: missing}
	if force {
		// A record read again: taken unless older than what is known.
		// (At the version known, it is what the server holds now.)
		next := srv
		next.Version++
		if !e.newer(next) {
			res.Skipped++
			return nil
		}
	} else if !e.newer(srv) {
		res.Skipped++
		return nil
	}
	head, err := tx.partitionHead(account, c.EntityType, c.EntityID)
	if err != nil {
		return err
	}
	if head != nil {
		// Local changes wait to be sent: they win locally; the server's
		// record is kept beside them.
		if e.ServerID == "" {
			e.ServerID = c.ServerID
		}
		if err := tx.keepConflictFields(e, &srv); err != nil {
			return err
		}
		e.setServer(srv)
		res.Kept++
		// The server's other fields show at once: the entity's data is
		// the record with the fields of the queued edits laid over it
		// (fields.go). The edits still go out on their own base.
		var merged []string
		if !c.Deleted && missing == "" && c.ServerID == e.ServerID {
			if _, merged, err = tx.takeServerData(e, c.Data); err != nil {
				return err
			}
		}
		// The record beside may make a refused head a conflict the app
		// can resolve (reconcile says which).
		if err := tx.reconcile(e, true); err != nil {
			return err
		}
		if len(merged) > 0 {
			return tx.mergedEvent(e, "remote", merged)
		}
		return nil
	}
	res.Applied++
	if c.Deleted {
		if err := tx.markRefresh(e, false); err != nil {
			return err
		}
		if err := tx.deleteEntity(account, c.EntityType, c.EntityID); err != nil {
			return err
		}
		e.SyncState = SyncSynced
		return tx.remoteEvent(e, EventEntityRemoved)
	}
	if missing != "" {
		e.setServer(srv)
		return tx.reconcile(e, true)
	}
	if force && e.SyncState == SyncSynced && e.Server == nil && e.ServerID == c.ServerID &&
		e.ServerVersion == c.Version && bytes.Equal(e.Data, c.Data) {
		return nil // as the server holds it
	}
	if err := tx.markRefresh(e, false); err != nil {
		return err
	}
	e.Data, e.Deleted, e.Server = c.Data, false, nil
	e.ServerVersion, e.ServerID, e.Unbased = c.Version, c.ServerID, false
	e.SyncState, e.SyncError, e.SyncCode = SyncSynced, "", ""
	e.Version++
	e.UpdatedAt = tx.now
	// What the server holds is this change's data, not a local
	// operation's payload.
	e.SyncedOperationID = ""
	if err := tx.saveEntity(e); err != nil {
		return err
	}
	return tx.remoteEvent(e, EventEntityChanged)
}

// endFullPass removes the synced entities of account that the full pass
// did not see, and drops the pass's marks.
func (tx *txw) endFullPass(account string) (int, error) {
	seen, err := tx.seenBucket(account, false)
	if err != nil {
		return 0, err
	}
	prefix := []byte(account + "\x00")
	var gone []*Entity
	c := tx.b(bucketEntities).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if seen != nil && seen.Get(k) != nil {
			continue
		}
		e, err := decodeEntity(k, v)
		if err != nil {
			return 0, err
		}
		if e.AccountID != account || e.ServerID == "" {
			continue // never on the server as far as this device knows
		}
		gone = append(gone, e)
	}
	removed := 0
	for _, e := range gone {
		head, err := tx.partitionHead(account, e.Type, e.ID)
		if err != nil {
			return 0, err
		}
		if head != nil {
			// Unsent local changes are never removed by a pull; but the
			// server no longer holds the record (deleted and swept):
			// that is kept beside them, so their answer and a resolve
			// know it.
			if srv := e.gone(e.knownID()); e.newer(srv) {
				e.setServer(srv)
				if err := tx.saveEntity(e); err != nil {
					return 0, err
				}
			}
			continue
		}
		if err := tx.deleteEntity(account, e.Type, e.ID); err != nil {
			return 0, err
		}
		e.SyncState = SyncSynced
		if err := tx.remoteEvent(e, EventEntityRemoved); err != nil {
			return 0, err
		}
		removed++
	}
	return removed, tx.clearSeen(account)
}

func (tx *txw) remoteEvent(e *Entity, typ string) error {
	return tx.event(Event{
		Type:       typ,
		AccountID:  e.AccountID,
		EntityType: e.Type,
		EntityID:   e.ID,
		SyncState:  e.SyncState,
		Data:       originRemote,
	})
}

// Conflict records that the server refused the operation id (held by
// owner) because it holds a newer version of the entity, or deleted it
// (server.ID empty: the record the operation was sent to):
// the operation fails declined (no attempt of it was applied, so the
// next attempt goes under a new key), and its entity turns conflict with
// the server's record beside the local data.
//
// The answer may be a replay, as old as the key's first execution, and a
// pull may land between the server's answer and this: the entity keeps
// the newer of the two, by version, and an answer without a version (a
// 410 or 404 says only that the server no longer holds the record live)
// never replaces what a pull kept.
func (s *Store) Conflict(ctx context.Context, id, owner, code, message string, server ServerState) error {
	return s.update(ctx, func(tx *txw) error {
		op, err := tx.failOwned(id, owner, code, message, true, false)
		if err != nil {
			return err
		}
		e, err := tx.loadEntity(op.AccountID, op.EntityType, op.EntityID)
		if err != nil || e == nil {
			return err
		}
		srv := server
		if srv.Base != nil {
			if b, err := canonicalJSON(srv.Base); err == nil && len(b) <= tx.s.cfg.MaxDataBytes {
				srv.Base = b
			} else {
				srv.Base = nil
			}
		}
		if srv.Deleted {
			srv.Data, srv.Paths, srv.Base = nil, nil, nil
		} else if c, err := canonicalJSON(srv.Data); err == nil && len(c) <= tx.s.cfg.MaxDataBytes {
			srv.Data = c
		} else {
			// Not an object this store can hold: the record is still
			// shown by version, and taking it makes the entity stale.
			srv.Missing = StaleRefreshNeeded
			if len(srv.Data) > tx.s.cfg.MaxDataBytes || len(c) > tx.s.cfg.MaxDataBytes {
				srv.Missing = StaleTooLarge
			}
			srv.Data = nil
		}
		if srv.Version > 0 && srv.Version == e.ServerVersion && cmp.Or(srv.ID, e.ServerID) == e.ServerID && !srv.Deleted &&
			!e.serverAhead() {
			// Refused at the very version the change is based on: a
			// merging server refuses a create of an id another device
			// made, or a change sent as made on no version, field by
			// field. Its record is the one the entity is based on, at
			// its real version: kept beside it as is. (Taken as an
			// answer without a version, below, it would stand one
			// version past, with this version's data, and hide the next
			// one from the feed.)
			e.setServer(srv)
			return tx.reconcile(e, true)
		}
		if srv.Version <= e.ServerVersion && (srv.ID == "" || srv.ID == e.ServerID) {
			// An answer without the record's version (a 410, a 404, a
			// 409 whose record has none): the server is past the version
			// the change was made on, but by how much is not known. What
			// a pull kept beside the entity stays (the feed orders the
			// record's versions; an answer, fresh or replayed, cannot be
			// placed among them); without it, the lowest version the
			// answer can stand for. Never more: a version the server did
			// not make could hide the next one it makes (the record made
			// again after a deletion), which the feed would then skip.
			if e.Server != nil && cmp.Or(e.Server.ID, e.ServerID) == e.ServerID {
				srv = *e.Server
			} else {
				srv.Version = e.ServerVersion + 1
			}
		}
		// The newer of what the answer says and what a pull brought
		// meanwhile: a replayed answer is as old as its first execution,
		// and a pull may land between the server's answer and this.
		if e.newer(srv) {
			e.setServer(srv)
		} else if e.Server != nil && len(srv.Paths) > 0 && e.Server.Version >= srv.Version {
			// The pull brought this record, or a newer version of it,
			// first: the refusal adds which fields are in conflict, and
			// the base (and the newer version's changes to this
			// device's other fields join them).
			if err := tx.carryConflictFields(e, &srv, e.Server); err != nil {
				return err
			}
		}
		return tx.reconcile(e, true)
	})
}

// Resolve values.
const (
	TakeServer = "server"
	TakeLocal  = "local"
)

// ErrNoConflict: Resolve was asked for an entity that is not in conflict.
var ErrNoConflict = errors.New("queue: the entity is not in conflict")

// Resolve settles an entity in conflict. TakeServer makes the local
// entity the server's record (its data, or its removal when the server
// deleted it) and drops the local changes, none of which reached the
// server. TakeLocal keeps the local data and sends it again, made on the
// server's current version: an update (or a delete, if the entity is
// deleted locally), or a create when the server deleted the record. The
// returned entity is the result; Removed is set when it left the store.
// app names the app that resolved (Operation.App of the operation
// TakeLocal queues); empty for the admin token.
func (s *Store) Resolve(ctx context.Context, account, entityType, id, take, app string) (e Entity, removed bool, err error) {
	return s.ResolveWith(ctx, account, entityType, id, Resolution{Take: take}, app)
}

// Resolution is how the app settles a conflict (Store.ResolveWith):
// exactly one of its fields is set.
type Resolution struct {
	// Take is TakeServer or TakeLocal, for the whole entity. Under a
	// conflict field by field (the server named the fields), TakeLocal
	// keeps this device's changed fields laid over the server's record,
	// not the whole local data.
	Take string
	// Paths picks a side per field in conflict: each of them (Conflict
	// paths, and only those) maps to TakeLocal or TakeServer. This
	// device's changes to other fields are kept.
	Paths map[string]string
	// Data is the merged data the app made itself: a JSON object.
	Data json.RawMessage
}

// ResolveWith settles an entity in conflict as r says (Resolve for the
// whole entity). A resolution that keeps anything of this device goes
// out as a new operation on the server's current version: an update
// naming the fields in which it differs from the server's record (a
// create when the server deleted it). One that keeps nothing of this
// device is TakeServer.
func (s *Store) ResolveWith(ctx context.Context, account, entityType, id string, r Resolution, app string) (e Entity, removed bool, err error) {
	n := 0
	for _, set := range []bool{r.Take != "", r.Paths != nil, r.Data != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return e, false, fmt.Errorf("%w: give one of take, paths or data", ErrInvalidWrite)
	}
	if r.Take != "" && r.Take != TakeServer && r.Take != TakeLocal {
		return e, false, fmt.Errorf("%w: take must be %q or %q", ErrInvalidWrite, TakeServer, TakeLocal)
	}
	var data json.RawMessage
	if r.Data != nil {
		if !bytes.HasPrefix(bytes.TrimSpace(r.Data), []byte("{")) {
			return e, false, fmt.Errorf("%w: data must be a JSON object", ErrInvalidWrite)
		}
		if err := jsonstrict.Check(r.Data, MaxDataDepth); err != nil {
			return e, false, fmt.Errorf("%w: data: %v", ErrInvalidWrite, err)
		}
		if data, err = canonicalJSON(r.Data); err != nil {
			return e, false, fmt.Errorf("%w: data must be a JSON object: %v", ErrInvalidWrite, err)
		}
		if len(data) > s.cfg.MaxDataBytes {
			return e, false, fmt.Errorf("%w: data is %d bytes, more than the limit of %d", ErrInvalidWrite, len(data), s.cfg.MaxDataBytes)
		}
	}
	take := r.Take
	err = s.update(ctx, func(tx *txw) error {
		removed = false
		ent, err := tx.loadEntity(account, entityType, id)
		if err != nil {
			return err
		}
		if ent == nil {
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		if ent.SyncState != SyncConflict || ent.Server == nil {
			return fmt.Errorf("%w: %s/%s is %s", ErrNoConflict, entityType, id, ent.SyncState)
		}
		srv := *ent.Server
		// What the resolution keeps: nil for the local data as it is
		// (TakeLocal of a whole-record conflict), else the data to send.
		result, err := tx.resolved(ent, r, data)
		if err != nil {
			return err
		}
		take := take
		var opPaths []string
		if result != nil {
			take = TakeLocal
			if !srv.Deleted && srv.Data != nil {
				if opPaths, err = fieldmerge.Diff(srv.Data, result); err != nil {
					return fmt.Errorf("%w: %v", ErrInvalidWrite, err)
				}
				if len(opPaths) == 0 && !ent.Deleted {
					take = TakeServer // it keeps nothing of this device
				}
			}
			if take == TakeLocal {
				ent.Data, ent.Deleted = result, false
			}
		}
		if srv.ID != "" {
			ent.ServerID = srv.ID // another record under the same id: the one to write to
		}
		ops, err := tx.partitionOps(account, entityType, id)
		if err != nil {
			return err
		}
		// Dropped: none of them reached the server. Taking the server's
		// record is the user's decision, as a discard is: what waited for
		// them in an ordered group goes on once nothing earlier waits. A
		// take of local data queues a new operation, which takes their
		// place in their groups (below).
		keep := take == TakeLocal && !(ent.Deleted && srv.Deleted)
		purge := func(next *Operation) error {
			if next != nil {
				if err := tx.takePlace(ops, next); err != nil {
					return err
				}
			}
			for _, o := range ops {
				if err := tx.purgeOp(o); err != nil {
					return err
				}
			}
			return nil
		}
		if !keep {
			if err := purge(nil); err != nil {
				return err
			}
		}
		ent.Server, ent.ServerVersion, ent.Unbased = nil, srv.Version, false
		ent.SyncedOperationID = ""
		if take == TakeServer {
			if srv.Deleted {
				if err := tx.deleteEntity(account, entityType, id); err != nil {
					return err
				}
				removed = true
				ent.SyncState = SyncSynced
				e = *ent
				return tx.entityEvent(ent, EventEntityRemoved)
			}
			if srv.Data == nil {
				// Its data is not held here: the local data stays, stale
				// until the record is read again.
				ent.Deleted = false
				ent.Server = &ServerState{Version: srv.Version, Missing: cmp.Or(srv.Missing, StaleRefreshNeeded)}
				if err := tx.reconcile(ent, true); err != nil {
					return err
				}
				e = *ent
				return nil
			}
			ent.Data, ent.Deleted = srv.Data, false
			ent.Version++
			ent.UpdatedAt = tx.now
			e = *ent
			if err := tx.reconcile(ent, true); err != nil {
				return err
			}
			e = *ent
			return nil
		}
		// Take local: a new operation on the server's current version.
		typ := OpUpdate
		switch {
		case ent.Deleted && srv.Deleted:
			// Both sides deleted it: nothing to send.
			if err := tx.deleteEntity(account, entityType, id); err != nil {
				return err
			}
			removed = true
			e = *ent
			return tx.entityEvent(ent, EventEntityRemoved)
		case ent.Deleted:
			typ = OpDelete
		case srv.Deleted:
			typ = OpCreate
			ent.ServerVersion = srv.Version // the create revives the record
		}
		if typ != OpDelete {
			if err := tx.roomForWrite(); err != nil {
				return err
			}
		}
		ent.Version++
		ent.UpdatedAt = tx.now
		ent.LastOperationID = newID()
		ent.SyncState, ent.SyncError, ent.SyncCode = SyncPending, "", ""
		op, err := tx.newOperation(ent, typ, ent.LastOperationID, "")
		if err != nil {
			return err
		}
		op.App = app
		if typ == OpUpdate && result != nil {
			op.Paths = fitPaths(opPaths)
		}
		if err := purge(op); err != nil {
			return err
		}
		if err := tx.saveEntity(ent); err != nil {
			return err
		}
		if err := tx.insertOperation(op, true); err != nil {
			return err
		}
		if err := tx.opEvent(op); err != nil {
			return err
		}
		e = *ent
		return tx.entityEvent(ent, EventEntityChanged)
	})
	return e, removed, err
}

// resolved returns the data a resolution r of e's conflict keeps (data:
// r.Data, canonical), or nil for TakeServer and for TakeLocal of the
// local data as it is.
func (tx *txw) resolved(e *Entity, r Resolution, data json.RawMessage) (json.RawMessage, error) {
	srv := e.Server
	if data != nil {
		return data, nil
	}
	byField := !srv.Deleted && srv.Data != nil && len(srv.Paths) > 0 && !e.Deleted && e.Data != nil
	if r.Take != "" {
		if r.Take == TakeServer || !byField {
			return nil, nil
		}
		// This device's changed fields laid over the server's record.
		paths, known, err := tx.pendingPaths(e)
		if err != nil || !known {
			return nil, err
		}
		return layPending(srv.Data, e, append(paths, srv.Paths...)), nil
	}
	if !byField {
		return nil, fmt.Errorf("%w: this conflict is not field by field (the server named no fields, or one side deleted the entity): take server or local, or give the merged data", ErrInvalidWrite)
	}
	var missing []string
	for _, p := range srv.Paths {
		if _, ok := r.Paths[p]; !ok {
			missing = append(missing, p)
		}
	}
	for p, side := range r.Paths {
		if !slices.Contains(srv.Paths, p) {
			return nil, fmt.Errorf("%w: %q is not a field in conflict (those are %s)", ErrInvalidWrite, p, fieldmerge.Quote(srv.Paths))
		}
		if side != TakeLocal && side != TakeServer {
			return nil, fmt.Errorf("%w: the side of %q must be %q or %q", ErrInvalidWrite, p, TakeLocal, TakeServer)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: no side given for %s", ErrInvalidWrite, fieldmerge.Quote(missing))
	}
	paths, err := tx.ownFields(e, nil)
	if err != nil {
		return nil, err
	}
	if paths == nil {
		// Neither the queued changes' fields nor the base are known:
		// every field where the local data differs counts as this
		// device's.
		if paths, err = fieldmerge.Diff(srv.Data, e.Data); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidWrite, err)
		}
	}
	keep := []string{}
	for _, p := range paths {
		if !slices.Contains(srv.Paths, p) {
			keep = append(keep, p)
		}
	}
	for p, side := range r.Paths {
		if side == TakeLocal {
			keep = append(keep, p)
		}
	}
	out := layPending(srv.Data, e, keep)
	if out == nil {
		return nil, fmt.Errorf("%w: the fields cannot be merged", ErrInvalidWrite)
	}
	return out, nil
}

// newer reports whether s, a record of the server under e's client id,
// is newer than what e knows of the server: the record e is based on
// (ServerID at ServerVersion) and the one kept beside it (Server).
// Another server id than both is another record: the one e knew was
// deleted and swept and the id created again, so it is newer whatever
// its version. The record e is based on is never newer than a Server of
// another id, which the feed brought after it.
func (e *Entity) newer(s ServerState) bool {
	id := cmp.Or(s.ID, e.ServerID)
	if e.Server != nil {
		sid := cmp.Or(e.Server.ID, e.ServerID)
		switch {
		case id == sid:
			return s.Version > e.Server.Version
		case sid != e.ServerID:
			return id != e.ServerID // the old record is older; a third is newer
		}
	}
	if e.ServerID == "" || id == e.ServerID {
		return s.Version > e.ServerVersion
	}
	return true
}

// knownID is the id of the newest record of the server e knows.
func (e *Entity) knownID() string {
	id, _ := e.known()
	return id
}

// known is the newest record of the server e knows: its id and version.
func (e *Entity) known() (string, int64) {
	if e.Server != nil {
		if id := cmp.Or(e.Server.ID, e.ServerID); id != e.ServerID || e.Server.Version > e.ServerVersion {
			return id, e.Server.Version
		}
	}
	return e.ServerID, e.ServerVersion
}

// gone is the server's record id of e when the server says it no
// longer holds it live but not at which version: its deletion, kept beside e
// already, or one at the lowest version it can have (one past the
// newest version known). Never more: a record brought back after the
// deletion has a higher version, which the feed must not skip.
func (e *Entity) gone(id string) ServerState {
	var v int64
	if id == e.ServerID {
		v = e.ServerVersion
	}
	if e.Server != nil && cmp.Or(e.Server.ID, e.ServerID) == id {
		if e.Server.Deleted {
			return *e.Server
		}
		v = max(v, e.Server.Version)
	}
	return ServerState{ID: id, Version: v + 1, Deleted: true}
}

// serverUnheld reports whether e.Server is a live record of the server,
// at least as new as the one e is based on, whose data this device does
// not hold (ServerState.Missing): with nothing local to send, e is stale.
func (e *Entity) serverUnheld() bool {
	return e.Server != nil && e.Server.Missing != "" && !e.Server.Deleted &&
		(e.Server.Version >= e.ServerVersion || e.Server.ID != "" && e.Server.ID != e.ServerID)
}

// serverAhead reports whether e.Server is newer than the record e is
// based on.
func (e *Entity) serverAhead() bool {
	return e.Server != nil && (e.Server.Version > e.ServerVersion || e.Server.ID != "" && e.Server.ID != e.ServerID)
}

// setServer keeps s beside e as the server's record, its ID left empty
// when it is the record e is based on.
func (e *Entity) setServer(s ServerState) {
	if s.ID == e.ServerID {
		s.ID = ""
	}
	e.Server = &s
}
