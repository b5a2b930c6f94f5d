package queue

import (
	"bytes"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// An operation's payload is its entity's data when the operation was
// made, and usually still is: a create's or an update's payload is the
// data the entity row holds until the next write of the entity. Storing
// it twice doubled the file for large records (a queued 10 KB create took
// 25 KB). So an operation row whose payload equals its entity row's data
// leaves the payload out (the opPayloadInEntity field) and the entity row
// lists the operation's seq (entPayloadRefs).
//
// The rule that keeps this true: every operation row stored without its
// payload is listed by its entity row, and that row's data is the
// payload. The row helpers below are the only writers of both buckets:
//
//   - saveOp stores a payload by reference when it equals the entity
//     row's data, and adds the operation to the row's list;
//   - saveEntity, when the data changes, and deleteEntity first write
//     the old data into every operation listed (materialize), then drop
//     the list;
//   - an operation row deleted (swept, purged) may stay listed until its
//     entity's next change; a list is pruned of such seqs when it grows.
//
// Check verifies the rule.

// opRow decodes the row v of operation seq and fills in a payload kept in
// its entity row.
func opRow(tx *bolt.Tx, seq uint64, v []byte) (*Operation, error) {
	op, inEntity, err := decodeOp(seq, v)
	if err != nil || !inEntity {
		return op, err
	}
	k := entityKey(op.AccountID, op.EntityType, op.EntityID)
	ev := tx.Bucket(bucketEntities).Get(k)
	if ev == nil {
		return nil, fmt.Errorf("queue: operation %d: its payload is its entity's data and the entity row is missing", seq)
	}
	data, refs, err := peekEntity(k, ev)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(refs, seq) {
		return nil, fmt.Errorf("queue: operation %d: its payload is its entity's data and the entity row does not list it", seq)
	}
	op.Payload = append([]byte(nil), data...)
	return op, nil
}

// peekEntity returns an entity row's data (aliasing v: valid only in the
// transaction, and only until the row is written) and payload references.
func peekEntity(k, v []byte) (data []byte, refs []uint64, err error) {
	if len(v) > 0 && v[0] == rowV1 {
		data, refs, err = entityDataRefs(v)
		if err != nil {
			return nil, nil, fmt.Errorf("queue: decode entity %q: %w", k, err)
		}
		return data, refs, nil
	}
	e, refs, err := decodeEntityRow(k, v, true)
	if err != nil {
		return nil, nil, err
	}
	return e.Data, refs, nil
}

func (w *txw) loadOpBySeq(seq uint64) (*Operation, error) {
	v := w.b(bucketOps).Get(u64(seq))
	if v == nil {
		return nil, fmt.Errorf("%w: seq %d", ErrOperationNotFound, seq)
	}
	return opRow(w.tx, seq, v)
}

func (w *txw) loadOp(id string) (*Operation, error) {
	seq := w.b(bucketOpIDs).Get([]byte(id))
	if seq == nil {
		return nil, fmt.Errorf("%w: %s", ErrOperationNotFound, id)
	}
	return w.loadOpBySeq(readU64(seq))
}

// saveOp writes op's row, its payload by reference when it is the entity
// row's data.
func (w *txw) saveOp(op *Operation) error {
	_, err := w.saveOpListing(op, false)
	return err
}

// saveOpListing is saveOp; with queue set, when it rewrites the entity
// row (to list op's payload), the row also lists op at the end of its
// partition, which it reports (one rewrite of the row for a new
// operation instead of two).
func (w *txw) saveOpListing(op *Operation, queue bool) (queued bool, err error) {
	inEntity := false
	if len(op.Payload) > 0 {
		if inEntity, queued, err = w.refPayload(op, queue); err != nil {
			return false, err
		}
	}
	return queued, w.put(w.b(bucketOps), u64(op.Seq), encodeOp(op, inEntity))
}

// refPayload reports whether op's payload is its entity row's data and,
// if so, has the row list op; and, with queue set, whether it listed op
// in the partition too.
func (w *txw) refPayload(op *Operation, queue bool) (inEntity, queued bool, err error) {
	ents := w.b(bucketEntities)
	k := entityKey(op.AccountID, op.EntityType, op.EntityID)
	v := ents.Get(k)
	if v == nil {
		return false, false, nil
	}
	data, refs, err := peekEntity(k, v)
	if err != nil {
		return false, false, err
	}
	if !bytes.Equal(data, op.Payload) {
		return false, false, nil
	}
	if slices.Contains(refs, op.Seq) {
		return true, false, nil
	}
	e, _, err := decodeEntityRow(k, v, true)
	if err != nil {
		return false, false, err
	}
	_, unfinished, _, err := entityLists(k, v)
	if err != nil {
		return false, false, err
	}
	if queue {
		if unfinished, err = queueBehind(unfinished, op); err != nil {
			return false, false, err
		}
	}
	if len(refs) >= 4 { // drop the operations gone since
		ops := w.b(bucketOps)
		refs = slices.DeleteFunc(refs, func(seq uint64) bool { return ops.Get(u64(seq)) == nil })
	}
	refs = append(refs, op.Seq)
	return true, queue, w.put(ents, k, encodeEntityRow(e, refs, unfinished))
}

// entityLists returns the lists of an entity row: its payload
// references, the seqs of its partition's unfinished operations (schema
// 6) and where the second starts in v (for withUnfinished). A row in
// JSON (schema 2) has neither.
func entityLists(k, v []byte) (refs, unfinished []uint64, tail int, err error) {
	if len(v) == 0 || v[0] != rowV1 {
		_, refs, err = decodeEntityRow(k, v, true)
		return refs, nil, 0, err
	}
	_, refs, unfinished, tail, err = entityRowParts(v)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("queue: decode entity %q: %w", k, err)
	}
	return refs, unfinished, tail, nil
}

func (w *txw) loadEntity(account, entityType, id string) (*Entity, error) {
	k := entityKey(account, entityType, id)
	v := w.b(bucketEntities).Get(k)
	if v == nil {
		return nil, nil
	}
	e, _, err := decodeEntityRow(k, v, false)
	return e, err
}

// saveEntity writes e's row. When its data changes, the operations whose
// payload was the old data get it written into their own rows first.
func (w *txw) saveEntity(e *Entity) error {
	ents := w.b(bucketEntities)
	k := entityKey(e.AccountID, e.Type, e.ID)
	var refs, unfinished []uint64
	if v := ents.Get(k); v != nil {
		oldData, oldRefs, err := peekEntity(k, v)
		if err != nil {
			return err
		}
		// The partition's operations stay listed (partitionAdd and
		// partitionDel keep the list).
		if _, unfinished, _, err = entityLists(k, v); err != nil {
			return err
		}
		if bytes.Equal(oldData, e.Data) {
			refs = oldRefs
		} else if err := w.materialize(oldData, oldRefs); err != nil {
			return err
		}
	}
	return w.put(ents, k, encodeEntityRow(e, refs, unfinished))
}

// deleteEntity removes an entity's row, after writing its data into the
// operations whose payload it was.
func (w *txw) deleteEntity(account, entityType, id string) error {
	return w.deleteEntityKey(entityKey(account, entityType, id))
}

// deleteEntityKey is deleteEntity by the row's key.
func (w *txw) deleteEntityKey(k []byte) error {
	ents := w.b(bucketEntities)
	v := ents.Get(k)
	if v == nil {
		return nil
	}
	data, refs, err := peekEntity(k, v)
	if err != nil {
		return err
	}
	if err := w.materialize(data, refs); err != nil {
		return err
	}
	return w.del(ents, k)
}

// materialize writes data as the payload of each operation in refs still
// stored by reference. data may alias the entity row: every write here is
// to the ops bucket.
func (w *txw) materialize(data []byte, refs []uint64) error {
	ops := w.b(bucketOps)
	for _, seq := range refs {
		v := ops.Get(u64(seq))
		if v == nil {
			continue // deleted since
		}
		op, inEntity, err := decodeOp(seq, v)
		if err != nil {
			return err
		}
		if !inEntity {
			continue
		}
		op.Payload = data
		if err := w.put(ops, u64(seq), encodeOp(op, false)); err != nil {
			return err
		}
	}
	return nil
}
