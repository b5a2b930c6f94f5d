package queue

import (
	"encoding/json"
	"fmt"
)

// The change log's events are stored in the row form of rowcodec.go
// (format byte, field bitmap, fields), not as JSON: every write appends
// at least two events, and a JSON event took about 276 bytes, where the
// row takes 70 to 100 (the ids of a UUID are 16 bytes, the event types
// and states one). An event in JSON (its first byte is '{'), from an
// older syncd, is still read. Its seq is its key and is not stored.

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
	w := &rowWriter{b: make([]byte, 0, 96+len(e.Data))}
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
