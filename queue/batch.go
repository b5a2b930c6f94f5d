package queue

import (
	"context"
	"fmt"
)

// Limits of a batch (ApplyBatch). The local API also bounds the body
// (localapi.DefaultMaxBatchBytes).
const (
	// MaxBatchWrites is the most writes one batch may hold.
	MaxBatchWrites = 1000
)

// BatchError is the error of a batch whose write at Index was refused:
// nothing of the batch was written.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("write %d of the batch: %v", e.Index, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

// ApplyBatch applies writes in ONE transaction: all of them, or, when
// one is refused, none (a *BatchError names it). Each write is what
// Apply would make of it alone, in order: a later write of the batch sees
// the earlier ones (a create then updates of one entity), and a write
// whose OperationID names an operation that exists replays it as Apply
// does. Each write's operation is queued as if written alone: the
// batch's writes to different entities go out in parallel. With ordered
// set, each operation waits until every one before it in the batch is
// done (Operation.After, docs/engine.md "Ordered batches"): they reach
// the server in the batch's order, across entities, and one that fails
// holds the rest until the user retries it (and it succeeds) or
// discards it. A write that replays an earlier one is not a member.
func (s *Store) ApplyBatch(ctx context.Context, ws []Write, ordered bool) ([]Result, error) {
	if len(ws) == 0 {
		return nil, fmt.Errorf("%w: a batch needs at least one write", ErrInvalidWrite)
	}
	if len(ws) > MaxBatchWrites {
		return nil, fmt.Errorf("%w: a batch holds at most %d writes, this one %d", ErrInvalidWrite, MaxBatchWrites, len(ws))
	}
	for i := range ws {
		if err := s.prepare(&ws[i]); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
	}
	results := make([]Result, 0, len(ws))
	err := s.update(ctx, func(tx *txw) error {
		results = results[:0]
		prev := "" // the group's last member so far
		for i := range ws {
			if ordered {
				ws[i].After = prev
			}
			r, err := tx.apply(&ws[i])
			if err != nil {
				return &BatchError{Index: i, Err: err}
			}
			results = append(results, r)
			// A write that replays an earlier one (its key is used) is
			// not a member: its operation keeps the place it had, and
			// the next member waits for the one before it here.
			if ordered && !r.Replayed {
				prev = r.Operation.ID
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
