package queue

import (
	"errors"
	"fmt"
	"maps"

	bolt "go.etcd.io/bbolt"
)

// Check verifies the file's consistency (bbolt's page check) and every
// invariant of the queue, returning all violations joined. Tests run it
// after every scenario; `syncd` may run it as a diagnostic. It reads the
// whole file in one transaction that holds writers out: not for a hot
// path.
//
// The invariants:
//   - a pending or failed entity has an unfinished operation that will
//     send it (the article's core invariant); a synced one has none;
//   - every unfinished operation is listed by its entity's row (its
//     partition, in order) and in the unfinished index, and no finished
//     one is;
//   - the ready index holds exactly the partition heads that are pending
//     or retry_waiting and not held by their ordered batch, under their
//     next_attempt_at; the lease index
//     exactly the sending operations, under their lease expiry;
//   - the done index holds exactly the done operations;
//   - op_ids maps every operation's id to its seq and nothing else;
//   - the per-state counts, in all and per account, account and type,
//     and app, equal the rows;
//   - a declined operation is permanently failed and not maybe applied,
//     and every operation's payload fingerprint matches its payload;
//   - an operation whose payload is kept in its entity's row is listed
//     by that row (payloadref.go);
//   - the change log's rows read and hold consecutive events up to its
//     sequence.
func (s *Store) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// bbolt's page check reads the free list, which a committing writer
	// changes without a reader's lock (a data race, and phantom "reachable
	// freed" pages): the check runs in a write transaction, rolled back, so
	// no commit runs meanwhile.
	err := s.inWriteTx(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			bad("bbolt: %v", err)
		}
		ops := map[uint64]*Operation{}
		counts := map[State]int{}
		accountCounts := map[string]int{}
		var queued int64
		if err := tx.Bucket(bucketOps).ForEach(func(k, v []byte) error {
			// opRow also checks that a payload kept in the entity row is
			// there, listed (payloadref.go).
			op, err := opRow(tx, readU64(k), v)
			if err != nil {
				bad("%v", err)
				return nil
			}
			if op.Seq != readU64(k) {
				bad("op %s: seq %d stored under key %d", op.ID, op.Seq, readU64(k))
			}
			if !op.State.Valid() {
				bad("op %s: unknown state %q", op.ID, op.State)
			}
			if op.Declined && (op.State != StatePermanentFailed || op.MaybeApplied) {
				bad("op %s: declined while %s, maybeApplied %v", op.ID, op.State, op.MaybeApplied)
			}
			if op.PayloadFingerprint != payloadFingerprint(op) {
				bad("op %s: payload fingerprint does not match its payload", op.ID)
			}
			ops[op.Seq] = op
			if unfinished(op.State) {
				queued += queuedSize(op)
			}
			counts[op.State]++
			for _, k := range countKeys(op, op.State)[1:] {
				accountCounts[string(k)]++
			}
			return nil
		}); err != nil {
			return err
		}
		ids := tx.Bucket(bucketOpIDs)
		if n := ids.Stats().KeyN; n != len(ops) {
			bad("op_ids has %d keys for %d operations", n, len(ops))
		}
		for seq, op := range ops {
			if v := ids.Get([]byte(op.ID)); v == nil || readU64(v) != seq {
				bad("op_ids does not map %s to %d", op.ID, seq)
			}
		}
		for _, st := range States {
			var n int
			if v := tx.Bucket(bucketCounts).Get([]byte(st)); v != nil {
				n = int(readU64(v))
			}
			if n != counts[st] {
				bad("count of %s is %d, rows say %d", st, n, counts[st])
			}
		}
		if got := queuedBytes(tx); got != queued {
			bad("queued bytes are %d, the unfinished operations' rows say %d", got, queued)
		}
		stored := map[string]int{}
		if err := tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
			if len(k) > 0 && k[0] < ' ' {
				stored[string(k)] = int(readU64(v))
			}
			return nil
		}); err != nil {
			return err
		}
		if !maps.Equal(stored, accountCounts) {
			bad("per-account, per-type and per-app counts %v, rows say %v", stored, accountCounts)
		}

		// Partitions: collect unfinished ops per partition in key order.
		heads := map[string]*Operation{}
		inPartition := map[uint64]bool{}
		// chained: a sending op behind its head is a chain's follower
		// (ClaimChains): every op ahead of it is sending under its owner.
		chained := map[uint64]bool{}
		sendingRun := map[string]string{} // partition → owner while all so far are sending
		// An entity row lists its partition's unfinished operations
		// (schema 6), ascending (rowReader.seqs refuses any other order).
		if tx.Bucket(bucketPartitionsV5) != nil {
			bad("schema 5's partitions bucket is left")
		}
		if err := tx.Bucket(bucketEntities).ForEach(func(k, v []byte) error {
			_, list, _, err := entityLists(k, v)
			if err != nil {
				bad("%v", err)
				return nil
			}
			for _, seq := range list {
				op := ops[seq]
				if op == nil {
					bad("entity %q lists missing op %d", k, seq)
					continue
				}
				if op.PartitionKey() != string(k) {
					bad("entity %q lists op %s of another entity", k, op.ID)
				}
				inPartition[seq] = true
				pk := string(k)
				if _, ok := heads[pk]; !ok {
					heads[pk] = op
					if op.State == StateSending {
						sendingRun[pk] = op.LeaseOwner
					}
				} else if owner, ok := sendingRun[pk]; ok && op.State == StateSending && op.LeaseOwner == owner {
					chained[seq] = true
				} else {
					delete(sendingRun, pk)
				}
			}
			return nil
		}); err != nil {
			return err
		}
		for seq, op := range ops {
			open := op.State != StateDone
			if open != inPartition[seq] {
				bad("op %s (%s): in partition index = %v", op.ID, op.State, inPartition[seq])
			}
			if open != isUnfinishedSeq(tx, seq) {
				bad("op %s (%s): in unfinished index = %v", op.ID, op.State, !open)
			}
			if (op.State == StateDone) != (tx.Bucket(bucketDone).Get(timeSeqKey(op.CompletedAt, seq)) != nil) {
				bad("op %s (%s): done index disagrees", op.ID, op.State)
			}
		}
		if n := countUnfinished(tx); n != len(inPartition) {
			bad("unfinished index has %d keys, partitions %d", n, len(inPartition))
		}
		if n, want := tx.Bucket(bucketDone).Stats().KeyN, counts[StateDone]; n != want {
			bad("done index has %d keys for %d done operations", n, want)
		}

		// Ready and lease indexes, per account.
		byID := make(map[string]*Operation, len(ops))
		for _, op := range ops {
			byID[op.ID] = op
		}
		wantReady := map[string]bool{}
		// held: an earlier member of its ordered group is not done.
		held := func(op *Operation) bool {
			for p, n := op.After, 0; p != "" && n < maxChain; n++ {
				prev := byID[p]
				if prev == nil {
					return false
				}
				if prev.State != StateDone {
					return true
				}
				p = prev.After
			}
			return false
		}
		wantWaits := map[string]bool{}
		for _, op := range ops {
			if op.After != "" && !held(op) {
				bad("op %s (%s) names %s before it in its ordered group, but nothing earlier waits: it should have been released", op.ID, op.State, op.After)
			}
			if op.After != "" {
				wantWaits[string(waitKey(op.After, op.Seq))] = true
			}
		}
		gotWaits := 0
		if err := tx.Bucket(bucketWaits).ForEach(func(k, _ []byte) error {
			gotWaits++
			if !wantWaits[string(k)] {
				bad("waits index has %q, which no operation's After names", k)
			}
			return nil
		}); err != nil {
			return err
		}
		if gotWaits != len(wantWaits) {
			bad("waits index has %d keys for %d links of ordered groups", gotWaits, len(wantWaits))
		}
		for _, h := range heads {
			if held(h) {
				continue // held by its ordered group
			}
			if h.State == StatePending || h.State == StateRetryWaiting {
				wantReady[h.AccountID+"\x00"+string(timeSeqKey(h.NextAttemptAt, h.Seq))] = true
			}
		}
		wantLease := map[string]bool{}
		for _, op := range ops {
			if op.State == StateSending {
				if heads[op.PartitionKey()] != op && !chained[op.Seq] {
					bad("op %s is sending but is not its partition's head nor behind it in its chain", op.ID)
				}
				wantLease[op.AccountID+"\x00"+string(timeSeqKey(op.LeaseExpiresAt, op.Seq))] = true
			}
		}
		for _, ix := range []struct {
			name []byte
			want map[string]bool
		}{{bucketReady, wantReady}, {bucketLeases, wantLease}} {
			got := 0
			if err := tx.Bucket(ix.name).ForEachBucket(func(account []byte) error {
				return tx.Bucket(ix.name).Bucket(account).ForEach(func(k, _ []byte) error {
					got++
					if !ix.want[string(account)+"\x00"+string(k)] {
						_, seq := splitTimeSeqKey(k)
						bad("%s index has an entry for op %d that should not be there", ix.name, seq)
					}
					return nil
				})
			}); err != nil {
				return err
			}
			if got != len(ix.want) {
				bad("%s index has %d entries, want %d", ix.name, got, len(ix.want))
			}
		}

		// The change log: every row reads, and the rows hold the
		// contiguous range of events from the first key to the
		// sequence (a group's, from its key on).
		evs := tx.Bucket(bucketEvents)
		var next uint64
		if err := evs.ForEach(func(k, v []byte) error {
			first := readU64(k)
			if next != 0 && first != next {
				bad("events: a row at %d where %d was next", first, next)
			}
			n := uint64(0)
			if err := decodeEvents(first, v, func(Event) error { n++; return nil }); err != nil {
				bad("%v", err)
				n = 1
			}
			next = first + n
			return nil
		}); err != nil {
			return err
		}
		if next != 0 && next-1 != evs.Sequence() {
			bad("events: the last row ends at %d, the sequence is %d", next-1, evs.Sequence())
		}

		// Entities against their partitions.
		return tx.Bucket(bucketEntities).ForEach(func(k, v []byte) error {
			e, err := decodeEntity(k, v)
			if err != nil {
				return err
			}
			head := heads[string(k)]
			switch {
			case e.SyncState == SyncPending && head == nil:
				bad("entity %s/%s is pending but no operation will send it", e.Type, e.ID)
			case e.SyncState == SyncPending && head.State == StatePermanentFailed:
				bad("entity %s/%s is pending behind failed operation %s", e.Type, e.ID, head.ID)
			case e.SyncState == SyncFailed && (head == nil || head.State != StatePermanentFailed):
				bad("entity %s/%s is failed without a failed operation at its head", e.Type, e.ID)
			case e.SyncState == SyncSynced && head != nil:
				bad("entity %s/%s is synced with operation %s unfinished", e.Type, e.ID, head.ID)
			case e.Deleted && head == nil:
				bad("entity %s/%s is deleted locally with no delete to send", e.Type, e.ID)
			}
			return nil
		})
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// inWriteTx runs fn in a write transaction and rolls it back: a read that
// no commit may run beside.
func (s *Store) inWriteTx(fn func(*bolt.Tx) error) error {
	tx, err := s.db.Begin(true)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(tx)
}
