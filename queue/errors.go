package queue

import (
	"errors"
	"fmt"
)

// Errors returned when opening or closing a Store.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("queue: store is closed")
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("queue: data file is locked by another process")
)

// Errors returned by Apply (app writes). None of them writes anything.
var (
	// ErrInvalidWrite is returned for a write whose fields are malformed:
	// an empty or oversized entity type or id, missing data on a create or
	// update, data that is not a JSON object. The wrapped message names
	// the field.
	ErrInvalidWrite = errors.New("queue: invalid write")
	// ErrEntityExists is returned by a create whose entity id is taken.
	ErrEntityExists = errors.New("queue: entity already exists")
	// ErrEntityNotFound is returned for an entity that does not exist or
	// has been deleted locally.
	ErrEntityNotFound = errors.New("queue: entity not found")
	// ErrEntityStale is returned by an update of an entity whose newer
	// version on the server this device cannot hold (SyncStale,
	// StaleTooLarge): a merge patch laid over the old data would replace
	// a version the user never saw. Raise the data limit and refresh it,
	// or delete it.
	ErrEntityStale = errors.New("queue: the server holds a newer version of the entity than this device can hold")
	// ErrKeyReused is returned when a write carries an operation id that
	// names an existing operation made from another request.
	ErrKeyReused = errors.New("queue: operation id reused with another request")
	// ErrStorageFull is returned by a write that found no room: the disk
	// is full, or the queue reached its configured size limit. Nothing
	// of the write was kept, and writes work again by themselves once
	// there is room. The wrapped message says which limit was hit.
	ErrStorageFull = errors.New("queue: storage full")
	// ErrNotPurgeable is returned by PurgeAccount when the account still
	// has operations that have not reached the server and force is false.
	ErrNotPurgeable = errors.New("queue: account has unsynced operations")
	// ErrPurging is returned by SaveSession for an account whose purge
	// has not finished: it signs in once its old rows are gone.
	ErrPurging = errors.New("queue: the account's data is being purged")
)

// ErrInvalidCursor is returned by a listing whose After cursor is not one
// it handed out.
var ErrInvalidCursor = errors.New("queue: invalid list cursor")

// Errors returned by the operation state machine.
var (
	// ErrOperationNotFound is returned for an unknown operation id.
	ErrOperationNotFound = errors.New("queue: operation not found")
	// ErrNoReady is returned by Claim when no partition head is ready.
	ErrNoReady = errors.New("queue: no operation ready")
	// ErrLeaseLost is returned when a worker reports on an operation whose
	// lease it no longer holds (it expired and another worker claimed it).
	ErrLeaseLost = errors.New("queue: lease not held")
	// ErrIllegalTransition is wrapped by every *TransitionError.
	ErrIllegalTransition = errors.New("queue: illegal state transition")
)

// TransitionError reports an operation state change that the state
// machine does not allow. It wraps ErrIllegalTransition.
type TransitionError struct {
	OperationID string
	From, To    State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("queue: illegal state transition %s -> %s for operation %s", e.From, e.To, e.OperationID)
}

func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }
