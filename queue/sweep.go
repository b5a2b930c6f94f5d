package queue

import (
	"context"
)

// sweepChunk bounds the work of one sweep transaction, so a sweep never
// holds the writer for long.
const sweepChunk = 1000

// Sweep deletes done operations completed before now minus the done
// retention, and change-log events beyond the history size. It works in
// small transactions and returns how many operations and events it
// removed.
func (s *Store) Sweep(ctx context.Context) (ops, events int, err error) {
	for {
		n := 0
		err = s.update(ctx, func(tx *txw) error {
			n = 0
			cutoff := tx.now.Add(-s.cfg.DoneRetention)
			c := tx.b(bucketDone).Cursor()
			var seqs []uint64
			for k, _ := c.First(); k != nil && len(seqs) < sweepChunk; k, _ = c.Next() {
				at, seq := splitTimeSeqKey(k)
				if !at.Before(cutoff) {
					break
				}
				seqs = append(seqs, seq)
			}
			for _, seq := range seqs {
				op, err := tx.loadOpBySeq(seq)
				if err != nil {
					return err
				}
				if op.After != "" {
					// Done while its ordered group was held: the members
					// after it wait through it. Kept until released.
					continue
				}
				if err := tx.deleteDone(op); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		ops += n
		if err != nil || n < sweepChunk {
			break
		}
	}
	if err != nil {
		return ops, events, err
	}
	for {
		n := 0
		err = s.update(ctx, func(tx *txw) error {
			n = 0
			b := tx.b(bucketEvents)
			c := b.Cursor()
			first, _ := c.First()
			if first == nil {
				return nil
			}
			// Events are only ever removed from the front, so the log is
			// the contiguous range first..Sequence().
			total := int(b.Sequence() - readU64(first) + 1)
			excess := total - s.cfg.EventHistory
			var keys [][]byte
			for k := first; k != nil && len(keys) < min(excess, sweepChunk); k, _ = c.Next() {
				keys = append(keys, append([]byte(nil), k...))
			}
			for _, k := range keys {
				if err := tx.del(b, k); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		events += n
		if err != nil || n < sweepChunk {
			break
		}
	}
	return ops, events, err
}

// deleteDone removes a done operation's row and its done-index entry.
func (tx *txw) deleteDone(op *Operation) error {
	if err := tx.del(tx.b(bucketDone), timeSeqKey(op.CompletedAt, op.Seq)); err != nil {
		return err
	}
	if err := tx.del(tx.b(bucketOps), u64(op.Seq)); err != nil {
		return err
	}
	if err := tx.del(tx.b(bucketOpIDs), []byte(op.ID)); err != nil {
		return err
	}
	return tx.count(op, StateDone, -1)
}
