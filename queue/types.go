package queue

import (
	"encoding/json"
	"time"
)

// OpType is what an operation does to its entity on the server.
type OpType string

// The operation types.
const (
	OpCreate OpType = "create"
	OpUpdate OpType = "update"
	OpDelete OpType = "delete"
)

// SyncState is an entity's sync state as apps see it.
type SyncState string

// The entity sync states.
const (
	// SyncPending: the entity has operations that have not reached the
	// server yet.
	SyncPending SyncState = "pending"
	// SyncSynced: every operation of the entity reached the server.
	SyncSynced SyncState = "synced"
	// SyncFailed: an operation of the entity failed permanently and needs
	// the user (retry or discard). SyncError says why.
	SyncFailed SyncState = "failed"
	// SyncConflict: the server refused the entity's change because it
	// holds a newer version, written by another device (409
	// version_conflict), or an update found the record deleted there.
	// Entity.Server holds the server's record beside the local data; the
	// app resolves it (Store.Resolve, or a new update made on the
	// server's version).
	SyncConflict SyncState = "conflict"
	// SyncStale: the server holds a version of the entity whose data
	// this device does not hold, and no local change of it waits to be
	// sent: the local data is older than the server's. SyncCode says
	// why: StaleTooLarge (the server's version is bigger than this
	// device's data limit) or StaleRefreshNeeded (a discarded change
	// left data the server may not hold; the daemon reads the record
	// again by itself). A refresh (POST .../refresh) settles it.
	SyncStale SyncState = "stale"
)

// Why an entity is stale (Entity.SyncCode, ServerState.Missing).
const (
	StaleTooLarge      = "too_large"
	StaleRefreshNeeded = "refresh_needed"
)

// ServerState is what this device knows of the server's record of an
// entity when it differs from the local one: the record a conflict
// answer carried, or a change the pull brought while the entity had
// local changes still unsent.
type ServerState struct {
	// ID is the server's id of the record. Empty: the record the entity
	// is based on (Entity.ServerID). Another id than ServerID is another
	// record under the same client id: the one the entity was based on
	// was deleted and swept, and the id was created again. Such a record
	// is newer than anything known of the old one, whatever its version.
	ID      string          `json:"id,omitempty"`
	Version int64           `json:"version"`
	Deleted bool            `json:"deleted,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Missing is set when the record is live but this device does not
	// hold its data (Data is absent), and says why: StaleTooLarge, or
	// StaleRefreshNeeded.
	Missing string `json:"missing,omitempty"`
	// Paths are the fields in conflict (JSON pointers), when a merging
	// server named them in its refusal; empty: the whole record.
	Paths []string `json:"paths,omitempty"`
	// Base is the record's data at the version the refused change was
	// made on, when the server's answer carried it.
	Base json.RawMessage `json:"base,omitempty"`
}

// Conflict is an entity's conflict field by field, as reads show it
// (Entity.Conflict).
type Conflict struct {
	// Paths are the fields both this device and another changed: only
	// those, each with its value at the base version, here and on the
	// server.
	Paths []ConflictPath `json:"paths"`
}

// ConflictPath is one field in conflict. A value is absent where the
// field does not exist on that side (or, for Base, where the server no
// longer keeps the base version: BaseKnown is false).
type ConflictPath struct {
	Path      string          `json:"path"`
	Base      json.RawMessage `json:"base,omitempty"`
	BaseKnown bool            `json:"baseKnown"`
	Local     json.RawMessage `json:"local,omitempty"`
	Server    json.RawMessage `json:"server,omitempty"`
}

// Entity is one record of an app, as stored locally.
type Entity struct {
	AccountID string          `json:"accountId"`
	Type      string          `json:"type"`
	ID        string          `json:"id"` // local id, chosen by the app or generated
	Data      json.RawMessage `json:"data"`
	// Deleted is true once the app deleted the entity locally and the
	// delete has not reached the server yet. Deleted entities are not
	// returned by reads; they disappear when the delete is done.
	Deleted   bool      `json:"deleted,omitempty"`
	SyncState SyncState `json:"syncState"`
	ServerID  string    `json:"serverId,omitempty"`
	SyncError string    `json:"syncError,omitempty"`
	// SyncCode is the stable code of SyncError: the failed operation's
	// error code (failed, conflict), or why the entity is stale.
	SyncCode string `json:"syncCode,omitempty"`
	// Version counts the local changes to this entity, starting at 1:
	// the app's writes, the revert when a refused update is discarded,
	// and the update queued when the server kept other data under a
	// create's id (Completion.OtherData), which may raise it to above the
	// server's version. It is the payload version of the operation a
	// write made.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// LastOperationID is the operation made by the latest write.
	LastOperationID string `json:"lastOperationId"`
	// SyncedOperationID is the last create or update of the entity that
	// the server applied: while that operation is kept (the done
	// retention), its payload is the data the server holds. Discarding an
	// update the server refused brings the entity back to it. Empty when
	// what the server holds is not known: after a delete went, or after a
	// discarded operation that the server may have applied.
	SyncedOperationID string `json:"syncedOperationId,omitempty"`
	// ServerVersion is the server's version of the record that the local
	// data is based on: from the answers to this device's writes and
	// from pulled changes applied to it. Updates and deletes are sent
	// with it as baseVersion. 0: the server never had it, as far as
	// this device knows.
	ServerVersion int64 `json:"serverVersion,omitempty"`
	// Server is the server's record when it is newer than ServerVersion
	// and not taken locally: in a conflict, and when a pull brought a
	// change while local changes were unsent (the local data wins
	// locally until the server's answer to them decides). Nil otherwise.
	Server *ServerState `json:"server,omitempty"`
	// Blocked is set, when the entity is read, while its next operation
	// waits for an earlier member of its ordered group (BlockedBy, as
	// Operation.BlockedBy). Not stored.
	Blocked   bool   `json:"blocked,omitempty"`
	BlockedBy string `json:"blockedBy,omitempty"`
	// Conflict is set, when the entity is read in state conflict and the
	// server named the fields in conflict, to those fields with their
	// base, local and server values. Not stored.
	Conflict *Conflict `json:"conflict,omitempty"`
	// Unbased is set when the server holds a record under this client
	// id (ServerID) that the local data was made on no version of: this
	// device's create was answered with a record another device created
	// first. Updates and deletes then go with baseVersion 0, so a server
	// with a conflict policy refuses them instead of taking them as made
	// on its current version. Cleared once the entity is based on a
	// version the server answered or the feed brought.
	Unbased bool `json:"-"`
}

// Operation is one user intent waiting to reach (or having reached) the
// server. Its ID is fixed when the intent is made and is the
// Idempotency-Key of every attempt (Key), until the server declines the
// operation: see Declined.
type Operation struct {
	ID                 string          `json:"id"`
	Seq                uint64          `json:"seq"` // monotonic, unique; the queue's order
	AccountID          string          `json:"accountId"`
	Type               OpType          `json:"operationType"`
	EntityType         string          `json:"entityType"`
	EntityID           string          `json:"entityId"`
	PayloadVersion     int64           `json:"payloadVersion"`
	Payload            json.RawMessage `json:"payload,omitempty"`
	PayloadFingerprint string          `json:"payloadFingerprint"`
	State              State           `json:"state"`
	AttemptCount       int             `json:"attemptCount"`
	NextAttemptAt      time.Time       `json:"nextAttemptAt"`
	LeaseOwner         string          `json:"leaseOwner,omitempty"`
	LeaseExpiresAt     time.Time       `json:"leaseExpiresAt,omitzero"`
	LastErrorCode      string          `json:"lastErrorCode,omitempty"`
	LastError          string          `json:"lastError,omitempty"`
	CreatedAt          time.Time       `json:"createdAt"`
	CompletedAt        time.Time       `json:"completedAt,omitzero"`
	// UserRetriedAt is when the user last retried the operation after a
	// permanent failure (zero: never). A user's retry confirms the
	// intent, so the daemon's age guard no longer holds it back.
	UserRetriedAt time.Time `json:"userRetriedAt,omitzero"`
	// RequestFingerprint identifies the app request that made this
	// operation (see Write.RequestFingerprint).
	RequestFingerprint string `json:"requestFingerprint,omitempty"`
	// Declined is set on a permanently failed operation the server
	// declined: it answered that it did not apply it (a 4xx about the
	// request itself, such as validation or forbidden; see Store.Decline).
	// The server keeps that answer under the key, so sending the same key
	// again can only replay it. A user's retry, or an update of the
	// entity, is therefore a new attempt: the operation takes the
	// entity's current data and a new RemoteKey. A delete of the entity
	// drops it and whatever of the entity is queued behind it, none of
	// which reached the server (see Store.Apply).
	Declined bool `json:"declined,omitempty"`
	// RemoteKey is the Idempotency-Key of the operation's attempts since
	// its last new attempt after the server declined it; empty means ID.
	RemoteKey string `json:"remoteKey,omitempty"`
	// MaybeApplied is set once an attempt under the current key may have
	// reached the server without a definite answer: its request went out
	// and the send failed (network error, timeout, 5xx) or was cut off,
	// or the worker holding it was lost (lease expiry, a crash). A later
	// fresh 4xx under the key is then no proof that the server did not
	// apply the operation (the daemon records a plain failure and the key
	// is kept); a replayed one is. A new key clears it.
	MaybeApplied bool `json:"maybeApplied,omitempty"`
	// MergedInto is set on an update that was never sent because a later
	// write of its entity superseded it (Config.MergeableTypes): the id
	// of that write's operation, which carries this one's data or deletes
	// the entity. Such an operation is done with no attempt; the server
	// sees its effect when the later one completes.
	MergedInto string `json:"mergedInto,omitempty"`
	// After is set on an operation of an ordered batch (but its first):
	// the operation before it in the batch, which must be done before
	// this one is sent. While that one is not done (waiting, or failed
	// and not yet retried or discarded), this one is held.
	After string `json:"after,omitempty"`
	// Blocked is set, when the operation is read, on a member of an
	// ordered group that waits for an earlier one: BlockedBy is the
	// nearest earlier member that is not done (failed, or waiting its
	// turn). Not stored.
	Blocked   bool   `json:"blocked,omitempty"`
	BlockedBy string `json:"blockedBy,omitempty"`
	// App is the app whose token made the write (Write.App); empty for
	// a write made with the admin token, and for the operations syncd
	// makes itself.
	App string `json:"app,omitempty"`
	// Paths are the fields an update changes (JSON pointers, package
	// fieldmerge): the members its merge patch set or removed, merged
	// with those of the unsent updates it superseded. Sent beside the
	// whole data, so a merging server applies only them. Nil: the whole
	// data (a create, a delete, an update syncd made of the whole data).
	Paths []string `json:"paths,omitempty"`
}

// Key returns the Idempotency-Key to send: RemoteKey, or ID when the
// server never declined the operation.
func (op *Operation) Key() string {
	if op.RemoteKey != "" {
		return op.RemoteKey
	}
	return op.ID
}

// PartitionKey returns the key of the operation's ordering partition:
// account, entity type and local entity id. Only the oldest unfinished
// operation of a partition may be sent.
func (op *Operation) PartitionKey() string {
	return partitionKey(op.AccountID, op.EntityType, op.EntityID)
}

// Write is one app write: a create, update or delete of an entity.
type Write struct {
	Op         OpType
	AccountID  string
	EntityType string
	// EntityID is required for update and delete. For a create it may be
	// empty, and a UUIDv7 (time-ordered) is generated.
	EntityID string
	// Data is the entity's new content, a JSON object; required for create
	// and update, ignored for delete.
	Data json.RawMessage
	// OperationID is the app's Idempotency-Key. Empty means generate a
	// UUIDv7. If an operation with this id exists and its
	// RequestFingerprint equals this write's, Apply returns it with
	// Replayed set and writes nothing; with another fingerprint, Apply
	// returns ErrKeyReused.
	OperationID        string
	RequestFingerprint string
	// After, set by ApplyBatch for an ordered batch, is the operation
	// that must be done before this write's is sent (Operation.After).
	After string
	// App names the app that made the write (Operation.App): recorded,
	// never checked here; the local API decides what an app may write.
	App string
	// Canonical says Data is CanonicalData's output already (the local
	// API makes it so to fingerprint the write): Apply stores it as it
	// is instead of encoding it again. It is still checked.
	Canonical bool
}

// Result is what Apply did.
type Result struct {
	Entity    Entity
	Operation Operation
	// Replayed is true when the write repeated an earlier one by its
	// operation id and nothing was written.
	Replayed bool
}

// Completion is what the server answered for a successful operation.
type Completion struct {
	// ServerID is the id the server gave the entity (create), if any.
	ServerID string

	// OtherData is set when the server answered a create with a record
	// it already held under the entity's id, and that record does not
	// hold the data the create sent: an earlier create of the same id
	// reached it (one whose operation was discarded while its outcome
	// was unknown, say). Unless the entity is deleted locally, the
	// completion queues an update of the entity's current data behind
	// the create, so the server does not keep the old data while the
	// entity reads as synced. ServerPayloadVersion is the record's
	// payloadVersion, if the answer carried one: the update's version
	// is above it and the entity's, since a server may ignore an update
	// older than what it holds.
	OtherData            bool
	ServerPayloadVersion int64

	// ServerVersion is the record's version after this write, from the
	// server's answer (0: the answer carried none).
	ServerVersion int64

	// Data is the record's data after this create or update, from the
	// server's answer (nil: it carried none). A merging server answers
	// the fields sent merged with what other devices wrote: the entity
	// takes it, with its edits still queued laid over it.
	Data json.RawMessage
}

// ListOptions pages through entities or operations. After is the cursor
// returned as the last item's id (entities) or seq (operations).
type ListOptions struct {
	Limit int
	After string
	// SyncState filters entities; State filters operations. Empty: all.
	SyncState SyncState
	State     State
	// AccountID filters operations by account. Empty: all accounts.
	AccountID string
	// EntityTypes, if not nil, filters operations by entity type: only
	// those of the listed types (none when it is empty but not nil).
	EntityTypes []string
}

// Stats summarises the queue for status screens and metrics.
type Stats struct {
	// Counts holds the number of operations in each state.
	Counts map[State]int `json:"counts"`
	// OldestPending is the creation time of the oldest operation that has
	// not finished (pending, sending, retry_waiting or permanent_failed);
	// zero when there is none.
	OldestPending time.Time `json:"oldestPending,omitzero"`
	// FileSize is the size of the data file in bytes; FreeBytes the bytes
	// in free pages that compaction would return.
	FileSize  int64 `json:"fileSize"`
	FreeBytes int64 `json:"freeBytes"`
	// QueuedBytes is what the operations waiting to be sent take: each
	// its payload and about 700 bytes of rows and indexes. MaxQueueBytes
	// (Config.MaxQueueBytes) bounds it; QueueFull says it reached it, and
	// app creates and updates fail with ErrStorageFull until the queue
	// drains.
	QueuedBytes   int64 `json:"queuedBytes"`
	MaxQueueBytes int64 `json:"maxQueueBytes,omitempty"`
	QueueFull     bool  `json:"queueFull,omitempty"`
	// Account is one account's share of Counts and OldestPending, when
	// asked for (Store.StatsFor).
	Account *AccountStats `json:"account,omitempty"`
}

// AccountStats is one account's share of Stats.
type AccountStats struct {
	Counts        map[State]int `json:"counts"`
	OldestPending time.Time     `json:"oldestPending,omitzero"`
}

// Event is one entry of the durable change log. Every mutation of the
// queue appends events in the same transaction, so the log and the data
// never disagree, and Seq grows across restarts.
type Event struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"`
	Type        string    `json:"type"`
	AccountID   string    `json:"accountId,omitempty"`
	EntityType  string    `json:"entityType,omitempty"`
	EntityID    string    `json:"entityId,omitempty"`
	OperationID string    `json:"operationId,omitempty"`
	// State is the operation's new state (operation.* events);
	// SyncState the entity's (entity.* events).
	State     State     `json:"state,omitempty"`
	SyncState SyncState `json:"syncState,omitempty"`
	ErrorCode string    `json:"errorCode,omitempty"`
	// MergedInto is set on the operation.state event of an update that
	// went done unsent, superseded by a later write (Operation.MergedInto):
	// its data reaches the server with that operation, not yet.
	MergedInto string `json:"mergedInto,omitempty"`
	// Data carries event-specific fields (session and status events).
	Data json.RawMessage `json:"data,omitempty"`
	// App is the app that made the operation (operation.state events).
	App string `json:"app,omitempty"`
	// BlockedBy is set on the operation.state event of an operation
	// that waits for an earlier member of its ordered group: that one.
	// The event of its release has none.
	BlockedBy string `json:"blockedBy,omitempty"`
}

// Event types written by the queue.
const (
	EventEntityChanged   = "entity.changed"   // an entity was written or its sync state changed
	EventEntityRemoved   = "entity.removed"   // an entity left the store (delete done, discard, purge)
	EventOperationState  = "operation.state"  // an operation changed state or was created
	EventOperationPurged = "operation.purged" // an operation was removed without finishing
)
