package queue

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/syncd/syncd/idempotency/fieldmerge"
)

// Field-level merge, on this device's side (docs/engine.md, "Field-level
// merge"). An update carries the fields its merge patch changed
// (Operation.Paths), so a merging server applies only those. While
// updates of an entity wait to be sent, the entity's data is the server's
// latest record with their fields laid over it: a pulled change to other
// fields, and the fields a merging server's answer brings, show at once.
// A create changes every field of its data. An entity with a delete, or
// an update of its whole data, queued keeps its local data as it is:
// which fields it changes is not known.

// pendingPaths returns the fields the unfinished operations of e's
// partition change, and whether they are known: false when one of them
// is a delete or an update of the whole data. A create changes every
// field of its data.
func (tx *txw) pendingPaths(e *Entity) ([]string, bool, error) {
	ops, err := tx.partitionOps(e.AccountID, e.Type, e.ID)
	if err != nil {
		return nil, false, err
	}
	paths := []string{}
	for _, op := range ops {
		switch {
		case op.Type == OpUpdate && op.Paths != nil:
			paths = append(paths, op.Paths...)
		case op.Type == OpCreate && op.Payload != nil:
			// A create sets every field of its data (a merging server
			// merges it into a record another device made under the id).
			leaves, err := fieldmerge.LeafPaths(op.Payload)
			if err != nil {
				return nil, false, nil
			}
			paths = append(paths, leaves...)
		default:
			return nil, false, nil
		}
	}
	slices.Sort(paths)
	return slices.Compact(paths), true, nil
}

// layPending returns the server's data with e's pending fields (paths)
// laid over it from e's data, canonical; nil when it cannot be made
// (then e's data stays as it is).
func layPending(server json.RawMessage, e *Entity, paths []string) json.RawMessage {
	if e.Data == nil || server == nil {
		return nil
	}
	merged, err := fieldmerge.Apply(server, e.Data, paths)
	if err != nil {
		return nil
	}
	if merged, err = canonicalJSON(merged); err != nil {
		return nil
	}
	return merged
}

// takeServerData makes e's data the server's data with e's pending
// fields laid over it, when they are known. It reports whether e's data
// changed, and the fields that changed.
func (tx *txw) takeServerData(e *Entity, server json.RawMessage) (bool, []string, error) {
	if e.Deleted || server == nil {
		return false, nil, nil
	}
	paths, known, err := tx.pendingPaths(e)
	if err != nil || !known {
		return false, nil, err
	}
	merged := layPending(server, e, paths)
	if merged == nil || len(merged) > tx.s.cfg.MaxDataBytes || string(merged) == string(e.Data) {
		return false, nil, nil
	}
	changed, err := fieldmerge.Diff(e.Data, merged)
	if err != nil {
		return false, nil, nil
	}
	e.Data = merged
	e.Version++ // a change of the local data, as a pull's
	e.UpdatedAt = tx.now
	return true, changed, nil
}

// conflictView is e's conflict field by field (Entity.Conflict): set
// when e is in conflict with a live record of the server that the server
// named the conflicting fields of.
func (e *Entity) conflictView() *Conflict {
	if e.SyncState != SyncConflict || e.Server == nil || e.Server.Deleted || e.Server.Data == nil || len(e.Server.Paths) == 0 || e.Deleted {
		// A delete's conflict is of the whole record: the paths the
		// server named are what others changed, not a choice per field.
		return nil
	}
	c := &Conflict{Paths: make([]ConflictPath, 0, len(e.Server.Paths))}
	for _, p := range e.Server.Paths {
		cp := ConflictPath{Path: p, BaseKnown: e.Server.Base != nil}
		if cp.BaseKnown {
			cp.Base, _, _ = fieldmerge.Get(e.Server.Base, p)
		}
		if e.Data != nil && !e.Deleted {
			cp.Local, _, _ = fieldmerge.Get(e.Data, p)
		}
		cp.Server, _, _ = fieldmerge.Get(e.Server.Data, p)
		c.Paths = append(c.Paths, cp)
	}
	return c
}

// keepConflictFields carries the fields in conflict over to next, a newer
// version of the server's record than e.Server that the pull brought
// while e is in conflict field by field: the fields stay in conflict,
// with the same base, and the newer version's changes to other fields
// this device changed join them. Without it, any edit of another field
// by anyone took the choice per field away.
func (tx *txw) keepConflictFields(e *Entity, next *ServerState) error {
	if e.SyncState != SyncConflict {
		return nil
	}
	return tx.carryConflictFields(e, e.Server, next)
}

// carryConflictFields gives next, a version of the server's record at
// least as new as old, old's fields in conflict and base, and the
// fields of e's pending changes that next changed since old. Nothing
// when old names no fields, or either is a deletion or another record.
func (tx *txw) carryConflictFields(e *Entity, old, next *ServerState) error {
	if old == nil || len(old.Paths) == 0 || old.Deleted || old.Data == nil ||
		next.Deleted || next.Data == nil || cmp.Or(old.ID, e.ServerID) != cmp.Or(next.ID, e.ServerID) {
		return nil
	}
	paths := slices.Clone(old.Paths)
	paths = append(paths, next.Paths...)
	if changed, err := fieldmerge.Diff(old.Data, next.Data); err == nil && len(changed) > 0 {
		pending, known, err := tx.pendingPaths(e)
		if err != nil {
			return err
		}
		for _, p := range pending {
			if !known || slices.Contains(paths, p) {
				continue
			}
			for _, c := range changed {
				if fieldmerge.Overlaps(p, c) {
					paths = append(paths, p)
					break
				}
			}
		}
	}
	slices.Sort(paths)
	next.Paths = slices.Compact(paths)
	if next.Base == nil {
		next.Base = old.Base
	}
	return nil
}
