// Package queue is syncd's durable local store: the apps' entities, the
// outgoing operation queue and its indexes, and the change log, in one
// bbolt file.
//
// It owns the file's buckets and key encodings, the one-transaction app
// write (entity row + operation row + index entries: a kill leaves both or
// neither), the operation state machine, leases, per-partition FIFO, the
// ready index that makes a claim O(log n), reconciliation of a completed
// operation onto its entity, and the retention sweep. It knows nothing of
// HTTP or of the remote server: the daemon claims operations, sends them
// through package transport and records the outcome here.
//
// # Writes and group commit
//
// Every mutation is group-committed: the writes queued while the previous
// transaction was committing run in one transaction, so concurrent
// writers share an fsync, and a lone writer never waits for a timer
// (bbolt's DB.Batch waits up to MaxBatchDelay before it commits, which
// made it slower than plain Update for a few writers). The first writer
// to arrive leads the transaction on its own goroutine and passes the
// lead to the oldest writer still waiting, so there is no committer
// goroutine to hand off to. When a method returns nil its change is on
// disk. BenchmarkWritePath keeps the comparison.
//
// A writer with nothing to answer meanwhile may mark its write
// Deferrable: a batch of only such writes waits up to Config.DeferWait
// (2ms) for more, so one fsync records several. The daemon records its
// send outcomes that way while other sends are in flight; an app's write
// is never deferrable and ends such a wait when it arrives.
//
// # Ordering
//
// The partition key is account + entity type + local entity id. Only the
// oldest unfinished operation of a partition (its head) may be claimed;
// a permanently failed head holds back the rest of its partition until
// the user retries or discards it, and never holds back other partitions.
// A head the server declined (Store.Decline) is also released by the
// next update of its entity, which is the user's fix.
//
// # Indexes
//
//	ready/<account>   nextAttemptAt|seq  heads that are pending or retry_waiting
//	leases/<account>  leaseExpiresAt|seq operations being sent
//	unfinished_set    seq/1024 → bitmap  oldest unfinished first (status age, listing by state)
//	done              completedAt|seq    done operations, for the sweep
//	counts            state; \0account\0state  operations per state, in all and per account
//
// # Rows
//
// Entity rows (entities, by account\0type\0id) and operation rows (ops,
// by seq) are in a compact binary form (rowcodec.go). An operation's
// payload is kept once: in its entity's row while it is the entity's
// data, in its own row once the entity changes (payloadref.go). An
// entity's row also lists its partition's unfinished operations, in
// order (since schema 6; a partitions tree before). A small queued
// create takes about 650 bytes of file, a 10 KB one about 12 KB
// (TestFootprint, BenchmarkFootprint).
//
// The file records its layout's version (meta/schema). Open refuses a
// newer one and upgrades an older one in place: schema 1 had no
// per-account counts; schema 2's rows are JSON, which schema 3 reads as
// they are and writes in the binary form when they next change; schema 6
// moves the partitions index into the entity rows.
//
// # Open
//
// Open reads a few pages whatever the queue's size: bbolt's free list is
// on disk after a clean stop and after most commits (freelist.go), and
// nothing at open walks a bucket. Only after a process was killed when
// the free list was long does bbolt walk the trees to rebuild it
// (BenchmarkStartup).
//
// Claim seeks the first key of the account's ready index and, failing
// that, of its lease index (an expired lease is recovered by the claim).
//
// # Change log
//
// Every mutation appends events (bucket events, seq from NextSequence) in
// its own transaction, so the log never disagrees with the data and seq
// grows across restarts. The events of one write share a row (a group,
// keyed by the first's seq: eventcodec.go). Config.OnCommit hands
// committed events to the daemon's event bus; Events reads the retained
// history for resuming subscribers.
package queue
