package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Row-level helpers shared by writes and state changes. They keep the
// operation row, its indexes and the per-state counts in step.

// count adds delta to the number of operations in state st, in all and
// in each share op is part of (countKeys).
func (w *txw) count(op *Operation, st State, delta int) error {
	if unfinished(st) {
		if err := w.addQueued(op, delta); err != nil {
			return err
		}
	}
	b := w.b(bucketCounts)
	// One buffer for the keys (bbolt copies a key it keeps) and one for
	// the values (bbolt keeps them until the commit): a write changes
	// counts at every transition.
	var kb [128]byte
	nk := countKeyN(op)
	vals := make([]byte, 8*nk)
	for i := range nk {
		k := appendCountKey(kb[:0], op, st, i)
		var n uint64
		if v := b.Get(k); v != nil {
			n = readU64(v)
		}
		if delta < 0 && n < uint64(-delta) {
			return fmt.Errorf("queue: count of %q would go negative", k)
		}
		n = uint64(int64(n) + int64(delta))
		var err error
		if n == 0 && k[0] < ' ' {
			err = w.del(b, k) // a share's counts go with its operations
		} else {
			v := vals[8*i : 8*i+8 : 8*i+8]
			binary.BigEndian.PutUint64(v, n)
			err = w.put(b, k, v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// queuedOpOverhead is what a queued operation takes besides its payload:
// its row, its index entries and its entity row's share (about 700 bytes
// of file for a small create, BenchmarkFootprint).
const queuedOpOverhead = 700

// queuedSize is what an unfinished operation counts against
// Config.MaxQueueBytes.
func queuedSize(op *Operation) int64 { return int64(len(op.Payload)) + queuedOpOverhead }

// unfinished reports whether an operation in state st is still to send.
func unfinished(st State) bool { return st != StateDone }

// addQueued adds delta operations of op's size to the queued bytes.
func (w *txw) addQueued(op *Operation, delta int) error {
	meta := w.b(bucketMeta)
	n := int64(readU64(meta.Get(metaQueuedBytes))) + int64(delta)*queuedSize(op)
	if n < 0 {
		return fmt.Errorf("queue: the queued bytes would go negative")
	}
	return w.put(meta, metaQueuedBytes, u64(uint64(n)))
}

// setPayload gives op a new payload, keeping the queued bytes in step.
func (w *txw) setPayload(op *Operation, data []byte) error {
	if !unfinished(op.State) {
		op.Payload = data
		return nil
	}
	if err := w.addQueued(op, -1); err != nil {
		return err
	}
	op.Payload = data
	return w.addQueued(op, 1)
}

// queuedBytes reads the queued bytes.
func queuedBytes(tx *bolt.Tx) int64 {
	return int64(readU64(tx.Bucket(bucketMeta).Get(metaQueuedBytes)))
}

// sumQueuedBytes adds up the queued size of every unfinished operation.
func sumQueuedBytes(tx *bolt.Tx) (int64, error) {
	var n int64
	ops := tx.Bucket(bucketOps)
	// Files older than schema 6 (the only ones without the count) list
	// a partition's operations under keys of their own.
	old := tx.Bucket(bucketPartitionsV5)
	if old == nil {
		return 0, fmt.Errorf("queue: the queued bytes are not counted and the file has no partitions index to count them from")
	}
	err := old.ForEach(func(k, _ []byte) error {
		seq := readU64(k[len(k)-8:])
		v := ops.Get(u64(seq))
		if v == nil {
			return fmt.Errorf("operation %d is in a partition but has no row", seq)
		}
		op, err := opRow(tx, seq, v)
		if err != nil {
			return err
		}
		n += queuedSize(op)
		return nil
	})
	return n, err
}

// setState moves op to the state to through the state machine, updating
// counts, and records an operation.state event. The caller maintains the
// indexes and saves the row.
func (w *txw) setState(op *Operation, to State) error {
	from := op.State
	if err := op.transition(to); err != nil {
		return err
	}
	if err := w.count(op, from, -1); err != nil {
		return err
	}
	if err := w.count(op, to, 1); err != nil {
		return err
	}
	return w.opEvent(op)
}

func (w *txw) opEvent(op *Operation) error {
	blockedBy := ""
	if op.After != "" && op.State != StateDone {
		if b, err := w.blocker(op); err == nil && b != nil {
			blockedBy = b.ID
		}
	}
	return w.event(Event{
		BlockedBy:   blockedBy,
		Type:        EventOperationState,
		AccountID:   op.AccountID,
		EntityType:  op.EntityType,
		EntityID:    op.EntityID,
		OperationID: op.ID,
		State:       op.State,
		ErrorCode:   op.LastErrorCode,
		MergedInto:  op.MergedInto,
		App:         op.App,
	})
}

// readyPut and readyDel maintain the per-account ready index.
func (w *txw) readyPut(op *Operation) error {
	b, err := w.accountBucket(bucketReady, op.AccountID, true)
	if err != nil {
		return err
	}
	return w.put(b, timeSeqKey(op.NextAttemptAt, op.Seq), nil)
}

func (w *txw) readyDel(op *Operation) error {
	b, err := w.accountBucket(bucketReady, op.AccountID, false)
	if b == nil || err != nil {
		return err
	}
	return w.del(b, timeSeqKey(op.NextAttemptAt, op.Seq))
}

func (w *txw) leasePut(op *Operation) error {
	b, err := w.accountBucket(bucketLeases, op.AccountID, true)
	if err != nil {
		return err
	}
	return w.put(b, timeSeqKey(op.LeaseExpiresAt, op.Seq), nil)
}

func (w *txw) leaseDel(op *Operation) error {
	b, err := w.accountBucket(bucketLeases, op.AccountID, false)
	if b == nil || err != nil {
		return err
	}
	return w.del(b, timeSeqKey(op.LeaseExpiresAt, op.Seq))
}

// A partition's unfinished operations are listed, in order, by its
// entity's row (entUnfinished, schema 6; a tree of their own before,
// which every write touched): an operation is unfinished only while its
// entity has a row (Check), and a write rewrites that row anyway.

// partitionSeqs returns the seqs of the unfinished operations of a
// partition, oldest first.
func (w *txw) partitionSeqs(account, entityType, entityID string) ([]uint64, error) {
	k := entityKey(account, entityType, entityID)
	v := w.b(bucketEntities).Get(k)
	if v == nil {
		return nil, nil
	}
	_, list, _, err := entityLists(k, v)
	return list, err
}

// partitionAdd lists op, new, at the end of its partition.
func (w *txw) partitionAdd(op *Operation) error {
	return w.editPartition(op, func(list []uint64) ([]uint64, error) { return queueBehind(list, op) })
}

// queueBehind returns list, a partition's, with op, new, at its end.
func queueBehind(list []uint64, op *Operation) ([]uint64, error) {
	if len(list) > 0 && list[len(list)-1] >= op.Seq {
		return nil, fmt.Errorf("queue: operation %d queued behind operation %d of its partition", op.Seq, list[len(list)-1])
	}
	return append(list, op.Seq), nil
}

// partitionDel takes op off its partition's list. An entity row removed
// before (in the transaction that finishes op) took the list with it.
func (w *txw) partitionDel(op *Operation) error {
	if w.b(bucketEntities).Get(entityKey(op.AccountID, op.EntityType, op.EntityID)) == nil {
		return nil
	}
	return w.editPartition(op, func(list []uint64) ([]uint64, error) {
		return slices.DeleteFunc(list, func(seq uint64) bool { return seq == op.Seq }), nil
	})
}

// editPartition rewrites the list of op's partition in its entity row,
// the row's other fields as they are.
func (w *txw) editPartition(op *Operation, edit func([]uint64) ([]uint64, error)) error {
	ents := w.b(bucketEntities)
	k := entityKey(op.AccountID, op.EntityType, op.EntityID)
	v := ents.Get(k)
	if v == nil {
		return fmt.Errorf("queue: operation %d: its entity %s/%s has no row", op.Seq, op.EntityType, op.EntityID)
	}
	if v[0] != rowV1 {
		// A row in JSON (schema 2): in the binary form from now on.
		e, refs, err := decodeEntityRow(k, v, false)
		if err != nil {
			return err
		}
		v = encodeEntityRow(e, refs, nil)
	}
	_, list, tail, err := entityLists(k, v)
	if err != nil {
		return err
	}
	if list, err = edit(list); err != nil {
		return err
	}
	return w.put(ents, k, withUnfinished(v, tail, list))
}

// partitionHead returns the oldest unfinished operation of a partition,
// or nil.
func (w *txw) partitionHead(account, entityType, entityID string) (*Operation, error) {
	list, err := w.partitionSeqs(account, entityType, entityID)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return w.loadOpBySeq(list[0])
}

// partitionTail returns the newest unfinished operation of a partition,
// or nil.
func (w *txw) partitionTail(account, entityType, entityID string) (*Operation, error) {
	list, err := w.partitionSeqs(account, entityType, entityID)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return w.loadOpBySeq(list[len(list)-1])
}

// partitionOps returns every unfinished operation of a partition, oldest
// first.
func (w *txw) partitionOps(account, entityType, entityID string) ([]*Operation, error) {
	list, err := w.partitionSeqs(account, entityType, entityID)
	if err != nil {
		return nil, err
	}
	ops := make([]*Operation, 0, len(list))
	for _, seq := range list {
		op, err := w.loadOpBySeq(seq)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// finish removes op from the unfinished indexes (partition, unfinished,
// ready, leases) and lets the next operation of its partition become the
// head. It does not touch the op row.
func (w *txw) finish(op *Operation) error {
	if err := w.readyDel(op); err != nil {
		return err
	}
	if err := w.leaseDel(op); err != nil {
		return err
	}
	if err := w.partitionDel(op); err != nil {
		return err
	}
	if err := w.delUnfinished(op.Seq); err != nil {
		return err
	}
	head, err := w.partitionHead(op.AccountID, op.EntityType, op.EntityID)
	if err != nil || head == nil {
		return err
	}
	if (head.State == StatePending || head.State == StateRetryWaiting) && !w.held(head) {
		return w.readyPut(head)
	}
	return nil
}

// waitKey is the key of the waits index: op waits for the operation id.
func waitKey(id string, seq uint64) []byte {
	return append(append([]byte(id), 0), u64(seq)...)
}

// Ordered groups (DESIGN.md Part 3, "Ordered groups"): the operations
// of an ordered batch form a chain, each naming the one before it
// (Operation.After), with an entry in the waits index per link. A member
// waits until EVERY earlier member is done, not only the one before it:
// blocker walks the chain past members already done (one done at once
// while the group was held, such as a delete with nothing to send) to
// the first that is not. Once nothing earlier waits, a member is
// released: its After is cleared and it is ready when it heads its
// partition. So After is set only on a member that is held (or one done
// while held), and a chain never outlives its hold.
//
// Whatever finishes, replaces or drops a member keeps the rule:
//   - done (complete, or done unsent): releaseWaiters releases what
//     waited for it, unless it is itself still held (then they stay held,
//     and are released with it);
//   - dropped (the user's discard, a resolve that takes the server's
//     record): the members after it wait for what it waited for
//     (releaseWaiters splices it out); only when nothing earlier is
//     unfinished do they go on;
//   - replaced by a new operation (resolve take local, a delete over a
//     declined head, a create over a declined delete): the new one takes
//     its place (takePlace): it waits for what the old one waited for,
//     and what waited for the old one waits for it.

// maxChain bounds a walk of a chain (a batch holds at most MaxBatchWrites
// operations; chains joined by replacements stay far below this).
const maxChain = 1 << 20

// blocker returns the first earlier member of op's ordered group that is
// not done (the nearest one up its chain), or nil when op is not held.
func (w *txw) blocker(op *Operation) (*Operation, error) {
	p := op.After
	for n := 0; p != "" && n < maxChain; n++ {
		prev, err := w.loadOp(p)
		if errors.Is(err, ErrOperationNotFound) {
			return nil, nil // dropped, and its waiters spliced: not a hold
		}
		if err != nil {
			return nil, err
		}
		if prev.State != StateDone {
			return prev, nil
		}
		p = prev.After
	}
	return nil, nil
}

// held reports whether op waits for an earlier member of its ordered
// group that is not done.
func (w *txw) held(op *Operation) bool {
	b, err := w.blocker(op)
	return err == nil && b != nil
}

// joinGroup links op, new, to the member before it (op.After): held, it
// goes in the waits index; not held (everything before it is done), its
// After is cleared. The caller saves op.
func (w *txw) joinGroup(op *Operation) error {
	if op.After == "" {
		return nil
	}
	if !w.held(op) {
		op.After = ""
		return nil
	}
	return w.put(w.b(bucketWaits), waitKey(op.After, op.Seq), nil)
}

// takePlace gives new the place of olds[0], the head of new's partition,
// which new replaces with olds (the operations of its entity it drops):
// new waits for what olds[0] waited for, and what waited for olds[0]
// waits for new. Call it before olds are purged and before new is
// inserted or saved. What waited for the others of olds waits for what
// they waited for (purgeOp hands their hold on): new cannot stand in
// more than one place, and what waits for each keeps the order of its own
// group. A new operation that has a place of its own (a write of an
// ordered batch) takes none: linking earlier members to it would make
// them wait for what it waits for, written later, which may wait for
// them (a cycle, which the property test found).
func (w *txw) takePlace(olds []*Operation, new *Operation) error {
	if new.After != "" || len(olds) == 0 {
		return nil
	}
	new.After = olds[0].After
	return w.moveWaiters(olds[0], new)
}

// supersede drops the unfinished operations of new's partition, none of
// which reached the server (they queue behind a head the server
// refused), for new, which takes the head's place in its ordered group
// (takePlace). Call it before new is inserted.
func (w *txw) supersede(new *Operation) error {
	ops, err := w.partitionOps(new.AccountID, new.EntityType, new.EntityID)
	if err != nil {
		return err
	}
	if err := w.takePlace(ops, new); err != nil {
		return err
	}
	for _, o := range ops {
		if err := w.purgeOp(o); err != nil {
			return err
		}
	}
	return nil
}

// waiterKeys returns the keys of the waits index of what waits for the
// operation id.
func (w *txw) waiterKeys(id string) [][]byte {
	prefix := append([]byte(id), 0)
	var keys [][]byte
	c := w.b(bucketWaits).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}

// moveWaiters makes what waits for old wait for new.
func (w *txw) moveWaiters(old, new *Operation) error {
	prefix := append([]byte(old.ID), 0)
	for _, k := range w.waiterKeys(old.ID) {
		if err := w.del(w.b(bucketWaits), k); err != nil {
			return err
		}
		next, err := w.loadOpBySeq(readU64(k[len(prefix):]))
		if errors.Is(err, ErrOperationNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		next.After = new.ID
		if err := w.put(w.b(bucketWaits), waitKey(new.ID, next.Seq), nil); err != nil {
			return err
		}
		if err := w.saveOp(next); err != nil {
			return err
		}
	}
	return nil
}

// waitedFor reports whether an operation of an ordered batch waits for
// the operation id.
func (w *txw) waitedFor(id string) bool {
	prefix := append([]byte(id), 0)
	k, _ := w.b(bucketWaits).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// releaseWaiters hands on op's hold, op now done or gone: what waited
// for op waits for what op waited for (op.After). When op waited for
// nothing, they are released (After cleared): each that heads its
// partition and waits to be sent becomes ready, and each done already
// (done while held) releases its own. A done op that is still held
// keeps its waiters: they go with it.
func (w *txw) releaseWaiters(op *Operation) error {
	if op.State == StateDone && op.After != "" && w.held(op) {
		return nil
	}
	after := op.After
	if op.State == StateDone {
		after = "" // not held (above): nothing earlier waits
	}
	prefix := append([]byte(op.ID), 0)
	for _, k := range w.waiterKeys(op.ID) {
		if err := w.del(w.b(bucketWaits), k); err != nil {
			return err
		}
		next, err := w.loadOpBySeq(readU64(k[len(prefix):]))
		if errors.Is(err, ErrOperationNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return err
		}
		next.After = after
		if after != "" && w.held(next) {
			if err := w.put(w.b(bucketWaits), waitKey(after, next.Seq), nil); err != nil {
				return err
			}
			if err := w.saveOp(next); err != nil {
				return err
			}
			continue
		}
		next.After = ""
		if err := w.saveOp(next); err != nil {
			return err
		}
		if next.State == StateDone {
			if err := w.releaseWaiters(next); err != nil {
				return err
			}
			continue
		}
		if next.State != StatePending && next.State != StateRetryWaiting {
			continue
		}
		head, err := w.partitionHead(next.AccountID, next.EntityType, next.EntityID)
		if err != nil {
			return err
		}
		if head != nil && head.Seq == next.Seq {
			if err := w.readyPut(next); err != nil {
				return err
			}
		}
		// Released: an event, so a view of it as blocked is put right.
		if err := w.opEvent(next); err != nil {
			return err
		}
	}
	return nil
}

// reconcileEntity recomputes an entity's sync state from its unfinished
// operations: none → synced (or, if deleted, the row goes); a permanently
// failed head → failed; otherwise pending. It emits entity events when
// something changed.
func (w *txw) reconcileEntity(account, entityType, entityID string) error {
	e, err := w.loadEntity(account, entityType, entityID)
	if err != nil || e == nil {
		return err
	}
	return w.reconcile(e, false)
}

// reconcile is reconcileEntity for an entity already loaded; dirty says
// that the caller changed e and it must be saved even if its sync state
// stays.
func (w *txw) reconcile(e *Entity, dirty bool) error {
	head, err := w.partitionHead(e.AccountID, e.Type, e.ID)
	if err != nil {
		return err
	}
	if head == nil && e.serverAhead() && !e.serverUnheld() {
		// The last local change is settled, and a pull brought a newer
		// record of the server meanwhile (another device's write, later
		// than this device's): take it now, as the pull would have. A
		// delete of this device's whose answer is older (a replay) does
		// not remove a record brought back since.
		return w.adoptServer(e)
	}
	if head == nil && e.Deleted && e.serverUnheld() {
		// A delete settled, but the server holds a newer live version
		// (bigger than this device holds): not removed, stale.
		e.Deleted, dirty = false, true
	}
	if head == nil && e.Deleted {
		if err := w.deleteEntity(e.AccountID, e.Type, e.ID); err != nil {
			return err
		}
		return w.entityEvent(e, EventEntityRemoved)
	}
	if head != nil && head.State == StatePermanentFailed && head.Declined && IsConflictCode(head.LastErrorCode) && e.Server == nil {
		// A conflict whose server record is not known here (a path
		// dropped it): the server holds a version at least the one the
		// change was made on, deleted or not known. It is kept beside the
		// entity as such, and read again (refresh), so the conflict
		// stays one the app can see and resolve.
		e.Server = &ServerState{Version: e.ServerVersion, Deleted: head.LastErrorCode == CodeDeletedOnServer}
		if !e.Server.Deleted {
			e.Server.Missing = StaleRefreshNeeded
		}
		dirty = true
	}
	state, syncErr, code := SyncPending, "", ""
	switch {
	case head == nil && e.serverUnheld():
		state, code = SyncStale, e.Server.Missing
		syncErr = staleError(e.Server)
	case head == nil:
		state = SyncSynced
	case head.State == StatePermanentFailed && head.Declined && IsConflictCode(head.LastErrorCode) && e.Server != nil:
		state, code = SyncConflict, head.LastErrorCode
		syncErr = readableError(head)
	case head.State == StatePermanentFailed:
		state, code = SyncFailed, head.LastErrorCode
		syncErr = readableError(head)
	}
	if state != SyncConflict && e.Server != nil && !e.serverAhead() && !e.serverUnheld() {
		e.Server, dirty = nil, true // what it told is taken or superseded
	}
	readAgain := state == SyncStale && code == StaleRefreshNeeded ||
		state == SyncConflict && e.Server != nil && e.Server.Missing == StaleRefreshNeeded
	if readAgain || e.SyncState == SyncStale || e.SyncState == SyncConflict {
		if err := w.markRefresh(e, readAgain); err != nil {
			return err
		}
	}
	if e.SyncState == state && e.SyncError == syncErr && e.SyncCode == code {
		if dirty {
			return w.saveEntity(e)
		}
		return nil
	}
	e.SyncState, e.SyncError, e.SyncCode = state, syncErr, code
	if err := w.saveEntity(e); err != nil {
		return err
	}
	return w.entityEvent(e, EventEntityChanged)
}

// adoptServer makes e the server's record it holds in e.Server: its data,
// or its removal.
func (w *txw) adoptServer(e *Entity) error {
	srv := *e.Server
	e.Server, e.ServerVersion, e.Unbased = nil, srv.Version, false
	if srv.ID != "" {
		e.ServerID = srv.ID
	}
	e.SyncState, e.SyncError, e.SyncCode = SyncSynced, "", ""
	if err := w.markRefresh(e, false); err != nil {
		return err
	}
	if srv.Deleted {
		if err := w.deleteEntity(e.AccountID, e.Type, e.ID); err != nil {
			return err
		}
		return w.remoteEvent(e, EventEntityRemoved)
	}
	e.Data, e.Deleted = srv.Data, false
	e.Version++
	e.UpdatedAt = w.now
	e.SyncedOperationID = ""
	if err := w.saveEntity(e); err != nil {
		return err
	}
	return w.remoteEvent(e, EventEntityChanged)
}

func (w *txw) entityEvent(e *Entity, typ string) error {
	ev := Event{
		Type:        typ,
		AccountID:   e.AccountID,
		EntityType:  e.Type,
		EntityID:    e.ID,
		OperationID: e.LastOperationID,
		SyncState:   e.SyncState,
	}
	if typ == EventEntityChanged && e.SyncState == SyncConflict && e.Server != nil && len(e.Server.Paths) > 0 {
		// A conflict field by field: its fields.
		ev.Data, _ = json.Marshal(map[string]any{"conflictPaths": e.Server.Paths})
	}
	return w.event(ev)
}

// mergedEvent is the entity.changed event of fields the server's record
// brought into e while its own edits wait (origin "remote": a pull;
// "answer": a merging server's answer to this device's write).
func (w *txw) mergedEvent(e *Entity, origin string, paths []string) error {
	data, _ := json.Marshal(map[string]any{"origin": origin, "paths": paths})
	return w.event(Event{
		Type:        EventEntityChanged,
		AccountID:   e.AccountID,
		EntityType:  e.Type,
		EntityID:    e.ID,
		OperationID: e.LastOperationID,
		SyncState:   e.SyncState,
		Data:        data,
	})
}

// Conflict codes: an operation failed with one of these leaves its
// entity in conflict (transport.CodeVersionConflict,
// transport.CodeDeletedOnServer).
const (
	CodeVersionConflict = "version_conflict"
	CodeDeletedOnServer = "deleted_on_server"
)

// IsConflictCode reports whether an operation's error code is a conflict
// with another device's write.
func IsConflictCode(code string) bool {
	return code == CodeVersionConflict || code == CodeDeletedOnServer
}

// readableError is the entity's syncError for a failed operation.
func readableError(op *Operation) string {
	if op.LastError != "" {
		return fmt.Sprintf("%s %s failed: %s (%s)", op.Type, op.EntityType, op.LastError, op.LastErrorCode)
	}
	return fmt.Sprintf("%s %s failed: %s", op.Type, op.EntityType, op.LastErrorCode)
}
