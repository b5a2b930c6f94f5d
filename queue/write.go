package queue

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/syncd/syncd/idempotency/fieldmerge"
	"github.com/syncd/syncd/idempotency/jsonstrict"
	bolt "go.etcd.io/bbolt"
)

// Limits on names. They keep keys small and printable.
const (
	MaxEntityTypeLen  = 64
	MaxEntityIDLen    = 128
	MaxAccountIDLen   = 256
	MaxOperationIDLen = 128
)

// ValidateEntityType reports whether s can name an entity type: 1 to 64
// ASCII letters, digits, '_', '-' or '.'.
func ValidateEntityType(s string) error {
	if s == "" || len(s) > MaxEntityTypeLen {
		return fmt.Errorf("%w: entity type must be 1 to %d characters", ErrInvalidWrite, MaxEntityTypeLen)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("%w: entity type %q may hold only letters, digits, '_', '-' and '.'", ErrInvalidWrite, s)
		}
	}
	return nil
}

// validName checks an id: 1..max bytes of printable ASCII without '/',
// and not "." or "..".
func validName(what, s string, max int) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%w: %s must be 1 to %d characters", ErrInvalidWrite, what, max)
	}
	if s == "." || s == ".." {
		// A path segment, not a name: a URL holding it cannot address it.
		return fmt.Errorf("%w: %s cannot be %q", ErrInvalidWrite, what, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return fmt.Errorf("%w: %s %q may hold only printable ASCII without spaces or '/'", ErrInvalidWrite, what, s)
		}
	}
	return nil
}

// ValidateEntityID reports whether s can be a local entity id.
func ValidateEntityID(s string) error { return validName("entity id", s, MaxEntityIDLen) }

// ValidateOperationID reports whether s can be an operation id (an app's
// Idempotency-Key).
func ValidateOperationID(s string) error { return validName("operation id", s, MaxOperationIDLen) }

// ValidateAccountID reports whether s can be an account id.
func ValidateAccountID(s string) error { return validName("account id", s, MaxAccountIDLen) }

func (s *Store) validate(w *Write) error {
	if !slices.Contains([]OpType{OpCreate, OpUpdate, OpDelete}, w.Op) {
		return fmt.Errorf("%w: unknown operation type %q", ErrInvalidWrite, w.Op)
	}
	if err := ValidateAccountID(w.AccountID); err != nil {
		return err
	}
	if err := ValidateEntityType(w.EntityType); err != nil {
		return err
	}
	if w.EntityID != "" || w.Op != OpCreate {
		if err := ValidateEntityID(w.EntityID); err != nil {
			return err
		}
	}
	if w.OperationID != "" {
		if err := ValidateOperationID(w.OperationID); err != nil {
			return err
		}
	}
	if w.Op == OpDelete {
		return nil
	}
	if len(w.Data) > s.cfg.MaxDataBytes {
		return fmt.Errorf("%w: data is %d bytes, more than the limit of %d", ErrInvalidWrite, len(w.Data), s.cfg.MaxDataBytes)
	}
	// One value every reader reads alike: valid UTF-8, no lone surrogate,
	// no member named twice, nesting bounded (MaxDataDepth).
	if err := jsonstrict.Check(w.Data, MaxDataDepth); err != nil {
		return fmt.Errorf("%w: data: %w", ErrInvalidWrite, err)
	}
	if !checkedObject(w.Data) {
		return fmt.Errorf("%w: data must be a JSON object", ErrInvalidWrite)
	}
	return nil
}

// Apply makes one app write durable: the entity row, its operation row
// and every index entry, in one transaction. When Apply returns nil the
// write is on disk (fsynced); when it returns an error nothing was
// written.
//
// A create stores Data as the entity's data. An update applies Data to
// it as an RFC 7396 JSON merge patch; its operation carries the whole
// resulting data, so resending it is idempotent on the server. A delete
// marks the entity deleted; reads stop returning it at once, and the row
// goes when the delete reaches the server. A delete of an entity whose
// partition head the server declined drops the partition's operations
// first, none of which reached the server; over a create the server never
// had, it is done at once (Result.Operation.State is done) and the row
// goes. An update or delete of a mergeable type supersedes the unsent
// update queued just before it (Config.MergeableTypes).
func (s *Store) Apply(ctx context.Context, w Write) (Result, error) {
	if err := s.prepare(&w); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.update(ctx, func(tx *txw) error {
		r, err := tx.apply(&w)
		res = r
		return err
	})
	return res, err
}

// prepare validates a write and fills in what Apply generates: the
// operation id, a create's entity id, canonical data.
func (s *Store) prepare(w *Write) error {
	if err := s.validate(w); err != nil {
		return err
	}
	// Ids syncd makes are UUIDv7: they grow with time, so the index
	// entries of a batch's new entities and operations land together at
	// the end of their B+trees instead of on a random page each.
	if w.OperationID == "" {
		w.OperationID = newID()
	}
	if w.Op == OpCreate && w.EntityID == "" {
		w.EntityID = newID()
	}
	if w.Op != OpDelete && !w.Canonical {
		c, err := canonicalJSON(w.Data)
		if err != nil {
			return fmt.Errorf("%w: data: %v", ErrInvalidWrite, err)
		}
		// Canonical data can be bigger than the app's (escaped U+2028,
		// invalid UTF-8 replaced); what is stored and sent must fit.
		if len(c) > s.cfg.MaxDataBytes {
			return fmt.Errorf("%w: data is %d bytes once encoded, more than the limit of %d", ErrInvalidWrite, len(c), s.cfg.MaxDataBytes)
		}
		w.Data = c
	}
	return nil
}

// roomForWrite refuses a write once the operations waiting to be sent
// reach Config.MaxQueueBytes.
func (tx *txw) roomForWrite() error {
	limit := tx.s.cfg.MaxQueueBytes
	if limit <= 0 {
		return nil
	}
	if queued := queuedBytes(tx.tx); queued >= limit {
		return fmt.Errorf("%w: the operations waiting to be sent take %d bytes, the limit (maxQueueBytes) is %d; nothing was written. Writes work again as the queue drains to the server", ErrStorageFull, queued, limit)
	}
	return nil
}

func (tx *txw) apply(w *Write) (Result, error) {
	// The app's key names an operation that exists: replay or conflict.
	if seq := tx.b(bucketOpIDs).Get([]byte(w.OperationID)); seq != nil {
		existing, err := tx.loadOpBySeq(readU64(seq))
		if err != nil {
			return Result{}, err
		}
		if existing.RequestFingerprint != w.RequestFingerprint || existing.AccountID != w.AccountID {
			return Result{}, fmt.Errorf("%w: %s", ErrKeyReused, w.OperationID)
		}
		res := Result{Operation: *existing, Replayed: true}
		if e, err := tx.loadEntity(existing.AccountID, existing.EntityType, existing.EntityID); err != nil {
			return Result{}, err
		} else if e != nil {
			res.Entity = *e
		}
		return res, nil
	}

	e, err := tx.loadEntity(w.AccountID, w.EntityType, w.EntityID)
	if err != nil {
		return Result{}, err
	}
	switch {
	case w.Op == OpCreate && e != nil && !e.Deleted:
		return Result{}, fmt.Errorf("%w: %s/%s", ErrEntityExists, w.EntityType, w.EntityID)
	case w.Op != OpCreate && (e == nil || e.Deleted):
		return Result{}, fmt.Errorf("%w: %s/%s", ErrEntityNotFound, w.EntityType, w.EntityID)
	}

	if w.Op != OpDelete {
		if err := tx.roomForWrite(); err != nil {
			return Result{}, err
		}
	}

	now := tx.now
	var paths []string // the fields an update's patch changes
	switch w.Op {
	case OpCreate:
		if e == nil {
			e = &Entity{AccountID: w.AccountID, Type: w.EntityType, ID: w.EntityID}
		}
		// Or the id of an entity deleted locally whose delete has not
		// reached the server: the app made it again. The create queues
		// behind the delete, and the row keeps its version count and
		// server id (the server brings a deleted record back).
		e.Data, e.Deleted, e.CreatedAt = w.Data, false, now
	case OpUpdate:
		if e.Data == nil || e.serverUnheld() && e.Server.Missing == StaleTooLarge {
			// A newer version pulled over the data limit: the patch laid
			// over the old data (or none) would replace what the user
			// never saw (see SyncStale).
			return Result{}, fmt.Errorf("%w: the server's %s/%s is over this device's data limit: raise the limit and refresh it", ErrEntityStale, w.EntityType, w.EntityID)
		}
		merged, err := mergePatch(e.Data, w.Data)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrInvalidWrite, err)
		}
		if paths, err = fieldmerge.PatchPaths(w.Data); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrInvalidWrite, err)
		}
		// A patch that makes a scalar an object changed the scalar's
		// field ({"a":{"b":null}} over a:5 makes a {}): /a, not /a/b.
		paths = fieldmerge.Clip(paths, e.Data)
		if len(merged) > tx.s.cfg.MaxDataBytes {
			return Result{}, fmt.Errorf("%w: data would be %d bytes, more than the limit of %d", ErrInvalidWrite, len(merged), tx.s.cfg.MaxDataBytes)
		}
		e.Data = merged
	case OpDelete:
		e.Deleted = true
	}
	serverDeleted := e.Server != nil && e.Server.Deleted
	// A write of an ordered batch is no resolution of a conflict: it does
	// not renew the refused head (that would carry its data ahead of the
	// batch's earlier members), so the entity stays in conflict, the
	// server's record beside it, for the app to resolve.
	//
	// Nor is an update behind a refused delete (the entity made again
	// behind it): the delete is not renewed, so the conflict stays for the
	// app to resolve (take local sends the data made again).
	head, err := tx.partitionHead(w.AccountID, w.EntityType, w.EntityID)
	if err != nil {
		return Result{}, err
	}
	resolves := e.SyncState == SyncConflict && e.Server != nil && w.After == "" &&
		!(w.Op == OpUpdate && head != nil && head.Type == OpDelete)
	deletedConflict := resolves && serverDeleted
	var mine []string // this device's fields, laid over the server's record by a resolution
	if resolves && w.Op == OpUpdate {
		// In a conflict field by field, the write keeps this device's
		// fields over the server's record, not the whole local data (as
		// take local does): other devices' fields are not overwritten.
		if mine, err = tx.ownFields(e, paths); err != nil {
			return Result{}, err
		}
		if mine != nil {
			if merged := layPending(e.Server.Data, e, mine); merged != nil && len(merged) <= tx.s.cfg.MaxDataBytes {
				e.Data = merged
			} else {
				mine = nil
			}
		}
	}
	if resolves {
		// The app's write on an entity in conflict is its resolution: a
		// change made on the server's current version.
		if e.Server.ID != "" && e.Server.ID != e.ServerID {
			e.ServerID, e.ServerVersion = e.Server.ID, e.Server.Version
		} else {
			e.ServerVersion = max(e.ServerVersion, e.Server.Version)
		}
		e.Server, e.Unbased = nil, false
	}
	e.Version++
	e.UpdatedAt = now
	e.LastOperationID = w.OperationID
	e.SyncState = SyncPending
	e.SyncError, e.SyncCode = "", ""

	op, err := tx.newOperation(e, w.Op, w.OperationID, w.RequestFingerprint)
	if err != nil {
		return Result{}, err
	}
	op.App = w.App
	op.After = w.After
	if w.Op == OpUpdate {
		op.Paths = fitPaths(paths)
	}

	if w.Op == OpDelete && head != nil && head.State == StatePermanentFailed && head.Declined {
		return tx.deleteOverDeclined(e, op, head)
	}
	if w.Op == OpUpdate && deletedConflict && head != nil && head.State == StatePermanentFailed && head.Declined {
		// The app edits an entity the server deleted (a conflict,
		// deleted_on_server): keeping its data is bringing the record
		// back, as resolve take local does. What is queued of it never
		// reached the server and goes unsent, and the write is a create
		// (an update would only meet the deletion again, and its base,
		// the deletion's version, is no version the record was live at).
		if err := tx.supersede(op); err != nil {
			return Result{}, err
		}
		op.Type, op.Paths = OpCreate, nil
		op.PayloadFingerprint = payloadFingerprint(op)
		head = nil
	}
	if w.Op == OpCreate && head != nil && head.State == StatePermanentFailed && head.Declined && head.Type == OpDelete {
		// The app makes again an entity whose delete the server refused
		// (another device edited it meanwhile: a conflict, or another
		// refusal). The delete, and what the app queued behind it (made
		// again and deleted again), never reached the server and go
		// unsent: the create is the app's resolution. While the server
		// holds the record live, the create is an update of it, made on
		// its current version (taken above); a record it deleted is
		// brought back by the create.
		if err := tx.supersede(op); err != nil {
			return Result{}, err
		}
		if e.ServerID != "" && !serverDeleted {
			op.Type = OpUpdate
			op.PayloadFingerprint = payloadFingerprint(op)
		}
		if head, err = tx.partitionHead(w.AccountID, w.EntityType, w.EntityID); err != nil {
			return Result{}, err
		}
	}
	if w.Op != OpCreate && head != nil && tx.s.mergeable[w.EntityType] && w.After == "" {
		if merged, err := tx.mergeTail(op); err != nil {
			return Result{}, err
		} else if merged != nil && merged.Seq == head.Seq {
			head = nil // op is the partition's head now
		}
	}
	// An update of an entity whose head the server declined is the
	// user's fix: the head goes again at once, with the data this update
	// makes, under a new key (Operation.Declined). Not a declined delete
	// (the entity was made again behind it): only the user's retry sends
	// that again. Any other failed head keeps the entity failed until the
	// user acts on it. Not a write of an ordered batch: the renewed head would carry its
	// data to the server ahead of the batch's earlier members; the group
	// waits for the user's retry or discard.
	renew := w.Op == OpUpdate && head != nil && head.State == StatePermanentFailed && head.Declined && head.Type != OpDelete && w.After == ""
	if head != nil && head.State == StatePermanentFailed && !renew {
		e.SyncState, e.SyncError, e.SyncCode = SyncFailed, readableError(head), head.LastErrorCode
		if head.Declined && IsConflictCode(head.LastErrorCode) && e.Server != nil {
			e.SyncState = SyncConflict // still in conflict (an ordered write resolves none)
		}
	}

	if err := tx.saveEntity(e); err != nil {
		return Result{}, err
	}
	if renew {
		if resolves && head.Type == OpCreate && e.ServerID != "" && !serverDeleted {
			// The app edits an entity whose create a merging server
			// refused on a field (another device made the id first):
			// the resolution is a change of that record, made on its
			// version (taken above), with every field this device set.
			// Sent again as a create, it would meet the same fields.
			head.Type = OpUpdate
			if leaves, err := fieldmerge.LeafPaths(e.Data); err == nil {
				head.Paths = unionPaths(leaves, fitPaths(paths))
			}
		} else if head.Type == OpUpdate && mine != nil && head.Paths == nil {
			// A whole-data update refused field by field: it goes again
			// naming this device's fields (found against the base).
			head.Paths = fitPaths(mine)
			if err := tx.foldInto(head); err != nil {
				return Result{}, err
			}
		} else if head.Type == OpUpdate {
			// The head goes again with the data this update makes: it
			// names this update's fields too (a field it named may be a
			// scalar now: "/o/x" after {"o":"S"}), which this update
			// sends again behind it, and carries the updates queued
			// between, which go unsent (sent after it, their older
			// values would come back for a while).
			head.Paths = unionPaths(head.Paths, fitPaths(paths))
			if err := tx.foldInto(head); err != nil {
				return Result{}, err
			}
		}
		if err := tx.userRetry(head); err != nil {
			return Result{}, err
		}
	}
	if err := tx.insertOperation(op, head == nil); err != nil {
		return Result{}, err
	}
	if err := tx.entityEvent(e, EventEntityChanged); err != nil {
		return Result{}, err
	}
	if err := tx.opEvent(op); err != nil {
		return Result{}, err
	}
	return Result{Entity: *e, Operation: *op}, nil
}

// deleteOverDeclined applies del, a delete of e, when the head of e's
// partition is an operation the server declined. Nothing of the partition
// has reached the server: the head was refused without being applied
// (Operation.Declined) and nothing behind a head is ever sent. So the
// partition's operations go unsent, as the user's discard would drop them,
// and the entity does not stay failed over a write the user has deleted.
// If the head is a create of an id the server has never answered for (no
// server id), the server holds no record of e as far as syncd can know
// (a discarded create may have reached it): the delete has nothing to
// send and is recorded done at once (its id still answers the app's
// Idempotency-Key replay), and e's row goes. Otherwise the server may hold
// e live, and the delete goes first; a server that holds no such record
// answers it 404 or 410, which is done.
func (tx *txw) deleteOverDeclined(e *Entity, del, head *Operation) (Result, error) {
	// The delete takes the head's place in its ordered group.
	if err := tx.supersede(del); err != nil {
		return Result{}, err
	}
	if e.ServerID == "" && e.Server != nil && e.Server.ID != "" && !e.Server.Deleted {
		// The create was refused for a record the server holds live
		// under the entity's id (its conflict showed it; a write that
		// resolves the conflict took it already, one in an ordered batch
		// does not): the delete goes to that record, made on the version
		// the conflict showed, or the server would keep it live while
		// this device has the entity gone.
		e.ServerID, e.ServerVersion = e.Server.ID, e.Server.Version
		e.Server, e.Unbased = nil, false
	}
	if head.Type != OpCreate || e.ServerID != "" {
		if err := tx.saveEntity(e); err != nil {
			return Result{}, err
		}
		if err := tx.insertOperation(del, true); err != nil {
			return Result{}, err
		}
		if err := tx.entityEvent(e, EventEntityChanged); err != nil {
			return Result{}, err
		}
		return Result{Entity: *e, Operation: *del}, tx.opEvent(del)
	}
	if err := tx.put(tx.b(bucketOpIDs), []byte(del.ID), u64(del.Seq)); err != nil {
		return Result{}, err
	}
	if err := tx.count(del, StatePending, 1); err != nil {
		return Result{}, err
	}
	// Done at once, but a member of an ordered group that is held stays
	// in it: what comes after it in the group still waits for what came
	// before.
	if err := tx.joinGroup(del); err != nil {
		return Result{}, err
	}
	if err := tx.doneUnsent(del); err != nil {
		return Result{}, err
	}
	e.SyncState, e.SyncedOperationID = SyncSynced, ""
	if err := tx.deleteEntity(e.AccountID, e.Type, e.ID); err != nil {
		return Result{}, err
	}
	return Result{Entity: *e, Operation: *del}, tx.entityEvent(e, EventEntityRemoved)
}

// mergeTail supersedes the last operation of op's partition by op, a new
// update or delete of an entity of a mergeable type, when nothing of it
// can have reached the server: an update, pending, never attempted. It
// returns the superseded operation, or nil. An update carries the
// entity's whole data and a delete removes it, so the server ends the
// same without the earlier update; its id keeps answering the app's
// Idempotency-Key replay.
func (tx *txw) mergeTail(op *Operation) (*Operation, error) {
	tail, err := tx.partitionTail(op.AccountID, op.EntityType, op.EntityID)
	if err != nil || tail == nil {
		return nil, err
	}
	if tail.Type != OpUpdate || tail.State != StatePending || tail.AttemptCount != 0 {
		return nil, nil
	}
	if tail.After != "" || tx.waitedFor(tail.ID) {
		// A member of an ordered batch: the order holds it, not its data.
		return nil, nil
	}
	if err := tx.finish(tail); err != nil {
		return nil, err
	}
	// op carries the fields both change.
	op.Paths = unionPaths(tail.Paths, op.Paths)
	tail.MergedInto = op.ID
	return tail, tx.doneUnsent(tail)
}

// ownFields returns the fields this device changed of e, in conflict
// field by field (e.Server names the fields): those its queued changes
// name, with patch's; or, when one of them is of the whole data, the
// fields in which its data differs from the record at the base version
// the server answered (a three-way merge). Nil when neither is known or
// the conflict is not field by field.
func (tx *txw) ownFields(e *Entity, patch []string) ([]string, error) {
	srv := e.Server
	if srv == nil || srv.Deleted || srv.Data == nil || len(srv.Paths) == 0 || e.Deleted || e.Data == nil {
		return nil, nil
	}
	pending, known, err := tx.pendingPaths(e)
	if err != nil {
		return nil, err
	}
	if known {
		return fieldmerge.Cover(append(pending, patch...)), nil
	}
	if srv.Base == nil {
		return nil, nil
	}
	own, err := fieldmerge.Diff(srv.Base, e.Data)
	if err != nil {
		return nil, nil
	}
	return own, nil
}

// foldInto makes the updates queued behind head, a refused update that
// goes again with the entity's current data, done unsent and carried by
// it (MergedInto): their values are in its data, and their fields join
// its own. Only when each of them is an update never attempted and in no
// ordered group; else nothing changes.
func (tx *txw) foldInto(head *Operation) error {
	ops, err := tx.partitionOps(head.AccountID, head.EntityType, head.EntityID)
	if err != nil {
		return err
	}
	var behind []*Operation
	for _, o := range ops {
		if o.Seq == head.Seq {
			continue
		}
		if o.Type != OpUpdate || o.State != StatePending || o.AttemptCount != 0 || o.After != "" || tx.waitedFor(o.ID) {
			return nil
		}
		behind = append(behind, o)
	}
	for _, o := range behind {
		head.Paths = unionPaths(head.Paths, o.Paths)
		if err := tx.finish(o); err != nil {
			return err
		}
		o.MergedInto = head.ID
		if err := tx.doneUnsent(o); err != nil {
			return err
		}
	}
	return nil
}

// unionPaths is the fields two changes change together: nil (the whole
// data) if either is. A path under another of them is left out: the
// other sets the whole of it ("/a" after "/a/b" made /a a number).
func unionPaths(a, b []string) []string {
	if a == nil || b == nil {
		return nil
	}
	return fitPaths(fieldmerge.Cover(append(slices.Clone(a), b...)))
}

// fitPaths is paths within the limits a server takes (fieldmerge.Fit):
// made coarser where they are not, so such a change still names what it
// changes (a coarser field may conflict more, and overwrites nothing
// silently). Nil (the whole data) only when no coarsening fits: more
// than fieldmerge.MaxPaths top-level members in one change.
func fitPaths(paths []string) []string {
	if paths == nil {
		return nil
	}
	out, ok := fieldmerge.Fit(paths)
	if !ok {
		return nil
	}
	return out
}

// doneUnsent records a pending operation done without sending it: its
// effect holds without the server (a delete of what the server never
// had), or a later operation carries it (MergedInto). The operation is in
// no unfinished index; its count is moved and its row saved.
func (tx *txw) doneUnsent(op *Operation) error {
	if err := tx.count(op, op.State, -1); err != nil {
		return err
	}
	if err := tx.count(op, StateDone, 1); err != nil {
		return err
	}
	op.State, op.CompletedAt = StateDone, tx.now
	if err := tx.saveOp(op); err != nil {
		return err
	}
	if err := tx.put(tx.b(bucketDone), timeSeqKey(op.CompletedAt, op.Seq), nil); err != nil {
		return err
	}
	if err := tx.releaseWaiters(op); err != nil {
		return err
	}
	return tx.opEvent(op)
}

// newOperation makes a pending operation of type typ for e as it is now:
// its payload is e's data (none for a delete), its payload version e's
// version, its seq the next one.
func (tx *txw) newOperation(e *Entity, typ OpType, id, requestFingerprint string) (*Operation, error) {
	seq, err := tx.b(bucketOps).NextSequence()
	if err != nil {
		return nil, err
	}
	op := &Operation{
		ID:                 id,
		Seq:                seq,
		AccountID:          e.AccountID,
		Type:               typ,
		EntityType:         e.Type,
		EntityID:           e.ID,
		PayloadVersion:     e.Version,
		State:              StatePending,
		NextAttemptAt:      tx.now,
		CreatedAt:          tx.now,
		RequestFingerprint: requestFingerprint,
	}
	if typ != OpDelete {
		op.Payload = e.Data
	}
	op.PayloadFingerprint = payloadFingerprint(op)
	return op, nil
}

// insertOperation writes a new pending operation: its row, its id, its
// place at the tail of its partition and in the unfinished index, and its
// count; isHead says that nothing of its partition is queued before it,
// so it is ready to be claimed. The caller records the events.
func (tx *txw) insertOperation(op *Operation, isHead bool) error {
	if err := tx.joinGroup(op); err != nil {
		return err
	}
	queued, err := tx.saveOpListing(op, true)
	if err != nil {
		return err
	}
	if err := tx.put(tx.b(bucketOpIDs), []byte(op.ID), u64(op.Seq)); err != nil {
		return err
	}
	if !queued {
		if err := tx.partitionAdd(op); err != nil {
			return err
		}
	}
	if err := tx.addUnfinished(op.Seq); err != nil {
		return err
	}
	if isHead && op.After == "" {
		if err := tx.readyPut(op); err != nil {
			return err
		}
	}
	return tx.count(op, StatePending, 1)
}

// ApplyViaBoltBatch makes the same write as Apply through bbolt's own
// group commit, DB.Batch (tuned by the DB's MaxBatchSize and
// MaxBatchDelay), instead of the store's. It exists for benchmarks that
// measure against bbolt's batching, the ceiling the design names; it
// appends no change-log events to OnCommit. Apps use Apply.
func (s *Store) ApplyViaBoltBatch(ctx context.Context, w Write) (Result, error) {
	if err := s.prepare(&w); err != nil {
		return Result{}, err
	}
	var res Result
	err := s.db.Batch(func(tx *bolt.Tx) error {
		r, err := (&txw{tx: tx, s: s, now: s.now()}).apply(&w)
		res = r
		return err
	})
	return res, err
}

// newID returns a new UUIDv7 (time-ordered) in its canonical form.
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}
