package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// The change log's events are stored in the row form of rowcodec.go
// (format byte, field bitmap, fields), not as JSON: every write appends
// at least two events, and a JSON event took about 276 bytes, where the
// row takes 70 to 100 (the ids of a UUID are 16 bytes, the event types
// and states one). An event in JSON (its first byte is '{'), from an
// older syncd, is still read. Its seq is its key and is not stored.
//
// Since schema 6 the events one write appends share a row (rowGroup),
// keyed by the first one's seq: each event after the first leaves out
// the fields it shares with the one before it. A create's two events
// (entity.changed, then operation.state of its operation) took two keys
// and about 140 bytes; as a group they take one key and about 75.

// Event fields, in the order they are written. Append only.
const (
	evTime = iota
	evType
	evAccountID
	evEntityType
	evEntityID
	evOperationID
	evState
	evSyncState
	evErrorCode
	evMergedInto
	evData
	evApp
	evBlockedBy
	evFields
)

// eventTypeTable holds the event types the queue and the daemon write.
// Append only: an index, once written, keeps its value. A type not in it
// is written as a string (enumRaw).
var eventTypeTable = []string{
	EventEntityChanged, EventEntityRemoved, EventOperationState, EventOperationPurged,
	EventAccountPurged, "connectivity.changed", "session.refresh_needed", "session.changed",
	"session.logged_out", "remote.misconfigured", "remote.restored", "queue.totals",
}

// encodeEvent returns e's row.
func encodeEvent(e *Event) []byte {
	w := newRowWriter(96 + len(e.Data))
	w.time(evTime, e.Time)
	w.enum(evType, e.Type, eventTypeTable)
	w.str(evAccountID, e.AccountID)
	w.str(evEntityType, e.EntityType)
	w.str(evEntityID, e.EntityID)
	w.str(evOperationID, e.OperationID)
	w.enum(evState, string(e.State), stateTable)
	w.enum(evSyncState, string(e.SyncState), syncStateTable)
	w.str(evErrorCode, e.ErrorCode)
	w.str(evMergedInto, e.MergedInto)
	w.bytes(evData, e.Data)
	w.str(evApp, e.App)
	w.str(evBlockedBy, e.BlockedBy)
	return w.finish()
}

// decodeEvent reads the row v of the event seq, in either form.
func decodeEvent(seq uint64, v []byte) (Event, error) {
	var e Event
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, &e); err != nil {
			return Event{}, fmt.Errorf("queue: decode event %d: %w", seq, err)
		}
		return e, nil
	}
	if len(v) == 0 || v[0] != rowV1 {
		return Event{}, fmt.Errorf("queue: decode event %d: %w: format %#x", seq, errRow, firstByte(v))
	}
	r := newRowReader(v, evFields)
	e.Seq = seq
	e.Time = r.time(evTime)
	e.Type = r.enum(evType, eventTypeTable)
	e.AccountID = r.str(evAccountID)
	e.EntityType = r.str(evEntityType)
	e.EntityID = r.str(evEntityID)
	e.OperationID = r.str(evOperationID)
	e.State = State(r.enum(evState, stateTable))
	e.SyncState = SyncState(r.enum(evSyncState, syncStateTable))
	e.ErrorCode = r.str(evErrorCode)
	e.MergedInto = r.str(evMergedInto)
	e.Data = r.bytes(evData)
	e.App = r.str(evApp)
	e.BlockedBy = r.str(evBlockedBy)
	if err := r.done(); err != nil {
		return Event{}, fmt.Errorf("queue: decode event %d: %w", seq, err)
	}
	return e, nil
}

// rowGroup is the form of a row holding consecutive events: the format
// byte, then for each event a uvarint bitmap of the fields it takes from
// the event before it (none for the first), a uvarint length and the
// event's row (rowV1) without those fields. The events' seqs are the
// key's and the ones after it.
const rowGroup = 0x02

// maxEventGroup bounds the events of one row: a batch's writes share rows
// too, and a reader of one event decodes its row's events before it.
const maxEventGroup = 32

// sharedEventFields returns the bitmap of the fields e shares with prev
// (each present in both, equal), and e without them.
func sharedEventFields(prev, e *Event) (same uint64, rest Event) {
	rest = *e
	if !prev.Time.IsZero() && prev.Time.Equal(e.Time) {
		same |= 1 << evTime
		rest.Time = time.Time{}
	}
	str := func(field int, p string, r *string) {
		if p != "" && p == *r {
			same |= 1 << field
			*r = ""
		}
	}
	str(evType, prev.Type, &rest.Type)
	str(evAccountID, prev.AccountID, &rest.AccountID)
	str(evEntityType, prev.EntityType, &rest.EntityType)
	str(evEntityID, prev.EntityID, &rest.EntityID)
	str(evOperationID, prev.OperationID, &rest.OperationID)
	str(evState, string(prev.State), (*string)(&rest.State))
	str(evSyncState, string(prev.SyncState), (*string)(&rest.SyncState))
	str(evErrorCode, prev.ErrorCode, &rest.ErrorCode)
	str(evMergedInto, prev.MergedInto, &rest.MergedInto)
	if len(prev.Data) > 0 && bytes.Equal(prev.Data, e.Data) {
		same |= 1 << evData
		rest.Data = nil
	}
	str(evApp, prev.App, &rest.App)
	str(evBlockedBy, prev.BlockedBy, &rest.BlockedBy)
	return same, rest
}

// takeShared sets the fields named by same from prev.
func (e *Event) takeShared(prev *Event, same uint64) {
	has := func(field int) bool { return same&(1<<field) != 0 }
	if has(evTime) {
		e.Time = prev.Time
	}
	set := func(field int, p string, r *string) {
		if has(field) {
			*r = p
		}
	}
	set(evType, prev.Type, &e.Type)
	set(evAccountID, prev.AccountID, &e.AccountID)
	set(evEntityType, prev.EntityType, &e.EntityType)
	set(evEntityID, prev.EntityID, &e.EntityID)
	set(evOperationID, prev.OperationID, &e.OperationID)
	set(evState, string(prev.State), (*string)(&e.State))
	set(evSyncState, string(prev.SyncState), (*string)(&e.SyncState))
	set(evErrorCode, prev.ErrorCode, &e.ErrorCode)
	set(evMergedInto, prev.MergedInto, &e.MergedInto)
	if has(evData) {
		e.Data = bytes.Clone(prev.Data)
	}
	set(evApp, prev.App, &e.App)
	set(evBlockedBy, prev.BlockedBy, &e.BlockedBy)
}

// appendEventGroup appends e to the group row g, whose last event is
// prev; a nil g starts a group with e.
func appendEventGroup(g []byte, prev, e *Event) []byte {
	var same uint64
	rest := *e
	if g == nil {
		g = []byte{rowGroup}
	} else {
		same, rest = sharedEventFields(prev, e)
	}
	row := encodeEvent(&rest)
	g = binary.AppendUvarint(g, same)
	g = binary.AppendUvarint(g, uint64(len(row)))
	return append(g, row...)
}

// encodeEventRow returns the row of consecutive events: one event's, or
// a group's.
func encodeEventRow(evs []Event) []byte {
	if len(evs) == 1 {
		return encodeEvent(&evs[0])
	}
	var g []byte
	for i := range evs {
		var prev *Event
		if i > 0 {
			prev = &evs[i-1]
		}
		g = appendEventGroup(g, prev, &evs[i])
	}
	return g
}

// decodeEvents calls fn with each event of the row v, stored under the
// key seq, oldest first: the one event of a single row, or a group's.
func decodeEvents(seq uint64, v []byte, fn func(Event) error) error {
	if len(v) == 0 || v[0] != rowGroup {
		e, err := decodeEvent(seq, v)
		if err != nil {
			return err
		}
		return fn(e)
	}
	if len(v) == 1 {
		return fmt.Errorf("queue: decode event %d: %w: an empty group", seq, errRow)
	}
	var prev Event
	for i, r := uint64(0), v[1:]; len(r) > 0; i++ {
		same, n := binary.Uvarint(r)
		if n <= 0 || i == 0 && same != 0 || same>>evFields != 0 {
			return fmt.Errorf("queue: decode event %d: %w: group member %d", seq+i, errRow, i)
		}
		r = r[n:]
		size, n := binary.Uvarint(r)
		if n <= 0 || size > uint64(len(r)-n) || size == 0 || r[n] != rowV1 {
			return fmt.Errorf("queue: decode event %d: %w: group member %d", seq+i, errRow, i)
		}
		e, err := decodeEvent(seq+i, r[n:n+int(size)])
		if err != nil {
			return err
		}
		r = r[n+int(size):]
		e.takeShared(&prev, same)
		prev = e
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// lastEventSeq returns the seq of the last event of the row v, stored
// under the key seq.
func lastEventSeq(seq uint64, v []byte) (uint64, error) {
	if len(v) == 0 || v[0] != rowGroup {
		return seq, nil
	}
	n := uint64(0)
	for r := v[1:]; len(r) > 0; n++ {
		_, a := binary.Uvarint(r)
		if a <= 0 {
			return 0, fmt.Errorf("queue: decode event %d: %w", seq+n, errRow)
		}
		size, b := binary.Uvarint(r[a:])
		if b <= 0 || size > uint64(len(r)-a-b) {
			return 0, fmt.Errorf("queue: decode event %d: %w", seq+n, errRow)
		}
		r = r[a+b+int(size):]
	}
	if n == 0 {
		return 0, fmt.Errorf("queue: decode event %d: %w: an empty group", seq, errRow)
	}
	return seq + n - 1, nil
}
