package queue

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Reads run in short read transactions and return copies.

// GetEntity returns a live (not deleted) entity of account, or one
// deleted locally whose delete needs the user (a conflict, a failure):
// the app must be able to see and resolve it.
func (s *Store) GetEntity(account, entityType, id string) (Entity, error) {
	var e Entity
	err := s.db.View(func(tx *bolt.Tx) error {
		k := entityKey(account, entityType, id)
		v := tx.Bucket(bucketEntities).Get(k)
		if v == nil {
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		row, err := decodeEntity(k, v)
		if err != nil {
			return err
		}
		if row.Deleted && !row.needsUser() {
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		e = *row
		markEntityBlocked(tx, &e)
		e.Conflict = e.conflictView()
		return nil
	})
	return e, err
}

// EntityRow returns an entity's stored row, including one deleted locally
// whose delete has not reached the server yet (GetEntity hides those).
// The daemon reads it at send time for the server id an update or delete
// is addressed to.
func (s *Store) EntityRow(account, entityType, id string) (Entity, error) {
	var e Entity
	err := s.db.View(func(tx *bolt.Tx) error {
		k := entityKey(account, entityType, id)
		v := tx.Bucket(bucketEntities).Get(k)
		if v == nil {
			return fmt.Errorf("%w: %s/%s", ErrEntityNotFound, entityType, id)
		}
		row, err := decodeEntity(k, v)
		if err == nil {
			e = *row
		}
		return err
	})
	return e, err
}

func clampLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultListLimit
	case n > MaxListLimit:
		return MaxListLimit
	}
	return n
}

// MaxListScan bounds the rows one listing reads, so a filter that
// matches little never holds a read transaction (and so the remap a
// growing write needs) for long; the listing then returns fewer items and
// a cursor to go on from.
const MaxListScan = 10000

// MaxListBytes bounds the entity data one page of ListEntities holds (8
// MiB): a page of 1,000 entities of 1 MiB each would otherwise be a
// gigabyte in memory, and more in its JSON answer. A page ends at the
// entity that passes it (the first is always taken) and has a next.
const MaxListBytes = 8 << 20

// ListEntities pages through the live entities of one type of account in
// id order, after opts.After, filtered by opts.SyncState. next is the
// cursor of the following page ("" at the end); a page may hold fewer
// than opts.Limit items and still have a next (see MaxListScan and
// MaxListBytes).
func (s *Store) ListEntities(account, entityType string, opts ListOptions) (items []Entity, next string, err error) {
	limit := clampLimit(opts.Limit)
	prefix := []byte(partitionKey(account, entityType, ""))
	items = []Entity{}
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEntities).Cursor()
		k, v := c.Seek(prefix)
		if opts.After != "" {
			after := entityKey(account, entityType, opts.After)
			k, v = c.Seek(after)
			if bytes.Equal(k, after) {
				k, v = c.Next()
			}
		}
		last, size := "", 0
		for scanned := 0; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(items) == limit || scanned == MaxListScan || size >= MaxListBytes {
				next = last // more rows follow: go on after the last one read
				return nil
			}
			scanned++
			e, err := decodeEntity(k, v)
			if err != nil {
				return err
			}
			last = e.ID
			// Deleted entities whose delete needs the user are listed
			// by the state that says so, not with the live ones.
			if e.Deleted && (opts.SyncState == "" || !e.needsUser()) || opts.SyncState != "" && e.SyncState != opts.SyncState {
				continue
			}
			markEntityBlocked(tx, e)
			e.Conflict = e.conflictView()
			items = append(items, *e)
			size += len(e.Data)
		}
		return nil
	})
	return items, next, err
}

// needsUser reports whether e waits for the user: in conflict, failed,
// or stale.
func (e *Entity) needsUser() bool {
	return e.SyncState == SyncConflict || e.SyncState == SyncFailed
}

// blockerID returns the id of the operation op waits for in its ordered
// group, read in tx: the nearest earlier member that is not done ("":
// not held). See txw.blocker.
func blockerID(tx *bolt.Tx, op *Operation) string {
	if op.After == "" || op.State == StateDone {
		return ""
	}
	p := op.After
	for n := 0; p != "" && n < maxChain; n++ {
		seq := tx.Bucket(bucketOpIDs).Get([]byte(p))
		if seq == nil {
			return ""
		}
		prev, _, err := decodeOp(readU64(seq), tx.Bucket(bucketOps).Get(seq))
		if err != nil {
			return ""
		}
		if prev.State != StateDone {
			return prev.ID
		}
		p = prev.After
	}
	return ""
}

// markBlocked sets op's Blocked and BlockedBy, read in tx.
func markBlocked(tx *bolt.Tx, op *Operation) {
	op.BlockedBy = blockerID(tx, op)
	op.Blocked = op.BlockedBy != ""
}

// markEntityBlocked sets e's Blocked and BlockedBy from its partition's
// head, read in tx (a pending entity only).
func markEntityBlocked(tx *bolt.Tx, e *Entity) {
	if e.SyncState != SyncPending {
		return
	}
	k := entityKey(e.AccountID, e.Type, e.ID)
	v := tx.Bucket(bucketEntities).Get(k)
	if v == nil {
		return
	}
	_, list, _, err := entityLists(k, v)
	if err != nil || len(list) == 0 {
		return
	}
	head, _, err := decodeOp(list[0], tx.Bucket(bucketOps).Get(u64(list[0])))
	if err != nil {
		return
	}
	e.BlockedBy = blockerID(tx, head)
	e.Blocked = e.BlockedBy != ""
}

// GetOperation returns an operation by id.
func (s *Store) GetOperation(id string) (Operation, error) {
	var op Operation
	err := s.db.View(func(tx *bolt.Tx) error {
		seq := tx.Bucket(bucketOpIDs).Get([]byte(id))
		if seq == nil {
			return fmt.Errorf("%w: %s", ErrOperationNotFound, id)
		}
		row, err := opRow(tx, readU64(seq), tx.Bucket(bucketOps).Get(seq))
		if err == nil {
			op = *row
			markBlocked(tx, &op)
		}
		return err
	})
	return op, err
}

// ListOperations pages through operations in queue order (seq), after
// the seq in opts.After, filtered by state and account. next is the
// cursor of the following page ("" at the end); a page may hold fewer
// than opts.Limit items and still have a next (see MaxListScan and
// MaxListBytes).
//
// A state other than done is listed from the unfinished index, so the
// few operations that wait or failed are found at once behind a long
// retained history of done ones.
func (s *Store) ListOperations(opts ListOptions) (items []Operation, next string, err error) {
	limit := clampLimit(opts.Limit)
	var after uint64
	if opts.After != "" {
		n, err := strconv.ParseUint(opts.After, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("%w: list cursor %q is not a sequence number", ErrInvalidCursor, opts.After)
		}
		after = n
	}
	items = []Operation{}
	err = s.db.View(func(tx *bolt.Tx) error {
		rows := opRows(tx, after+1) // every row, done ones too
		if opts.State != "" && opts.State != StateDone {
			rows = unfinishedRows(tx, after+1)
		}
		var last uint64
		scanned := 0
		for seq, v := range rows {
			if len(items) == limit || scanned == MaxListScan {
				next = strconv.FormatUint(last, 10) // more rows follow
				return nil
			}
			scanned++
			op, err := opRow(tx, seq, v)
			if err != nil {
				return err
			}
			last = op.Seq
			if opts.State != "" && op.State != opts.State || opts.AccountID != "" && op.AccountID != opts.AccountID ||
				opts.EntityTypes != nil && !slices.Contains(opts.EntityTypes, op.EntityType) {
				continue
			}
			markBlocked(tx, op)
			items = append(items, *op)
		}
		return nil
	})
	return items, next, err
}

// Stats returns the counts per state, the oldest unfinished operation's
// creation time and the file's size and free space.
func (s *Store) Stats() (Stats, error) { return s.StatsFor("") }

// StatsFor is Stats with Account, the share of the named account, read in
// the same transaction (none for an empty account).
func (s *Store) StatsFor(account string) (Stats, error) {
	var st Stats
	err := s.db.View(func(tx *bolt.Tx) error {
		st = Stats{Counts: readCounts(tx, nil)}
		var err error
		if st.OldestPending, err = oldestUnfinished(tx, ""); err != nil {
			return err
		}
		st.FileSize = tx.Size()
		st.FreeBytes = s.freeBytes()
		st.QueuedBytes = queuedBytes(tx)
		st.MaxQueueBytes = s.cfg.MaxQueueBytes
		st.QueueFull = st.MaxQueueBytes > 0 && st.QueuedBytes >= st.MaxQueueBytes
		if account == "" {
			return nil
		}
		a := &AccountStats{Counts: readCounts(tx, func(state State) []byte { return accountCountKey(account, state) })}
		if a.OldestPending, err = oldestUnfinished(tx, account); err != nil {
			return err
		}
		st.Account = a
		return nil
	})
	return st, err
}

// TypeCounts returns the number of operations of the given entity types
// in each state: in all accounts, and in account's (nil when account is
// empty). It reads the per-type counts, a few keys per account and type.
func (s *Store) TypeCounts(account string, types []string) (all, inAccount map[State]int, err error) {
	all = make(map[State]int, len(States))
	for _, st := range States {
		all[st] = 0
	}
	if account != "" {
		inAccount = maps.Clone(all)
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketCounts).Cursor()
		for k, v := c.Seek([]byte{2}); k != nil && k[0] == 2; k, v = c.Next() {
			acct, rest, ok1 := strings.Cut(string(k[1:]), "\x00")
			typ, st, ok2 := strings.Cut(rest, "\x00")
			if !ok1 || !ok2 || !slices.Contains(types, typ) {
				continue
			}
			all[State(st)] += int(readU64(v))
			if acct == account && inAccount != nil {
				inAccount[State(st)] += int(readU64(v))
			}
		}
		return nil
	})
	return all, inAccount, err
}

// AppCounts returns, for each app that made operations still kept, the
// number of them in each state.
func (s *Store) AppCounts() (map[string]map[State]int, error) {
	out := map[string]map[State]int{}
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketCounts).Cursor()
		for k, v := c.Seek([]byte{1}); k != nil && k[0] == 1; k, v = c.Next() {
			app, st, ok := strings.Cut(string(k[1:]), "\x00")
			if !ok {
				continue
			}
			if out[app] == nil {
				out[app] = map[State]int{}
			}
			out[app][State(st)] = int(readU64(v))
		}
		return nil
	})
	return out, err
}

// freeBytes is the bytes of the file's free pages, as of the last
// transaction that ended.
func (s *Store) freeBytes() int64 {
	return int64(s.db.Stats().FreePageN) * int64(s.pageSize)
}

// readCounts reads the count of every state, under key(state) (the
// state's own key when key is nil).
func readCounts(tx *bolt.Tx, key func(State) []byte) map[State]int {
	b := tx.Bucket(bucketCounts)
	counts := make(map[State]int, len(States))
	for _, st := range States {
		k := []byte(st)
		if key != nil {
			k = key(st)
		}
		counts[st] = 0
		if v := b.Get(k); v != nil {
			counts[st] = int(readU64(v))
		}
	}
	return counts
}

// oldestUnscanned bounds how many of the oldest unfinished operations
// oldestUnfinished decodes looking for an account's before it walks the
// account's partitions instead.
const oldestUnscanned = 64

// oldestUnfinished returns the creation time of the oldest unfinished
// operation, of account's only unless account is empty; zero when there
// is none. Usually the account's oldest is among the first few of all
// (one account signed in at a time), so it looks there first; otherwise
// it takes the smallest seq its entity rows list.
func oldestUnfinished(tx *bolt.Tx, account string) (time.Time, error) {
	ops := tx.Bucket(bucketOps)
	decode := func(seq []byte) (*Operation, error) {
		op, _, err := decodeOp(readU64(seq), ops.Get(seq)) // its payload is not needed
		return op, err
	}
	n := 0
	for seq := range unfinishedSeqs(tx, 0) {
		if n == oldestUnscanned {
			break
		}
		op, err := decode(u64(seq))
		if err != nil {
			return time.Time{}, err
		}
		if account == "" || op.AccountID == account {
			return op.CreatedAt, nil
		}
		n++
	}
	if account == "" || n < oldestUnscanned {
		return time.Time{}, nil // none (of account's) among them all
	}
	prefix := []byte(account + "\x00")
	var first uint64
	ec := tx.Bucket(bucketEntities).Cursor()
	for k, v := ec.Seek(prefix); k != nil && hasPrefix(k, prefix); k, v = ec.Next() {
		_, list, _, err := entityLists(k, v)
		if err != nil {
			return time.Time{}, err
		}
		if len(list) > 0 && (first == 0 || list[0] < first) {
			first = list[0]
		}
	}
	if first == 0 {
		return time.Time{}, nil
	}
	op, err := decode(u64(first))
	if err != nil {
		return time.Time{}, err
	}
	return op.CreatedAt, nil
}

// Events returns up to limit change-log events with seq > since, oldest
// first, and the seq of the oldest event still kept (0 when the log is
// empty). A since older than oldest-1 means events were swept: the
// reader missed some and must resync.
func (s *Store) Events(since uint64, limit int) (events []Event, oldest uint64, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketEvents).Cursor()
		if k, _ := c.First(); k != nil {
			oldest = readU64(k)
		}
		// A row holds the events from its key on (a group's, schema 6):
		// the one before the first key above since may hold since+1.
		k, v := c.Seek(u64(since + 1))
		if k == nil || readU64(k) > since+1 {
			var pk, pv []byte
			if k == nil {
				pk, pv = c.Last()
			} else {
				pk, pv = c.Prev()
			}
			holds := false
			if pk != nil {
				last, err := lastEventSeq(readU64(pk), pv)
				if err != nil {
					return err
				}
				holds = last > since
			}
			if holds {
				k, v = pk, pv
			} else {
				k, v = c.Seek(u64(since + 1))
			}
		}
		for ; k != nil; k, v = c.Next() {
			err := decodeEvents(readU64(k), v, func(e Event) error {
				if limit > 0 && len(events) >= limit {
					return errEnough
				}
				if e.Seq > since {
					events = append(events, e)
				}
				return nil
			})
			if err == errEnough {
				return nil
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	return events, oldest, err
}

// errEnough ends a walk that has what it needs.
var errEnough = errors.New("queue: enough")

// LastEventSeq returns the seq of the newest event ever written.
func (s *Store) LastEventSeq() (uint64, error) {
	var seq uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		seq = tx.Bucket(bucketEvents).Sequence()
		return nil
	})
	return seq, err
}
