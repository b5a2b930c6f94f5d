package queue

import (
	"encoding/binary"
	"strings"
	"time"
)

// The buckets of the data file. Keys sort: integers and times are 8-byte
// big-endian, composite keys are NUL-separated (NUL is refused in every
// name part, so a prefix is never ambiguous).
var (
	bucketMeta       = []byte("meta")           // "schema", "session"
	bucketCounts     = []byte("counts")         // state → uint64 number of operations; \0account\0state, \1app\0state, \2account\0type\0state → a share (countKeys)
	bucketEntities   = []byte("entities")       // account\0type\0id → Entity row (rowcodec.go), listing its partition's unfinished ops
	bucketOps        = []byte("ops")            // seq → Operation row (rowcodec.go)
	bucketOpIDs      = []byte("op_ids")         // operation id → seq
	bucketUnfinished = []byte("unfinished_set") // seq/1024 → bitmap of the block's unfinished ops (unfinishedset.go)
	bucketReady      = []byte("ready")          // account → bucket of nextAttemptAt+seq → empty: heads waiting to be sent
	bucketLeases     = []byte("leases")         // account → bucket of leaseExpiresAt+seq → empty: ops being sent
	bucketDone       = []byte("done")           // completedAt+seq → empty: done ops, for the retention sweep
	bucketEvents     = []byte("events")         // seq → Event row, or the row of the events from seq on (eventcodec.go): the durable change log
	bucketWaits      = []byte("waits")          // operation id\0seq → empty: the operation seq waits for (ordered batches)
	bucketApps       = []byte("apps")           // app name → App JSON: the apps' grants on the local API
)

var allBuckets = [][]byte{
	bucketMeta, bucketCounts, bucketEntities, bucketOps, bucketOpIDs,
	bucketUnfinished, bucketReady, bucketLeases, bucketDone, bucketEvents,
	bucketWaits, bucketApps,
}

var (
	metaSchema  = []byte("schema")
	metaSession = []byte("session")
	// metaQueuedBytes: the size of the unfinished operations
	// (queuedSize each), which Config.MaxQueueBytes bounds.
	metaQueuedBytes = []byte("queued_bytes")
)

// schemaVersion is the layout of the file; Open refuses a newer one.
// Version 2 added the per-account counts; Open builds them in a file of
// version 1. Version 3 stores entity and operation rows in a binary form
// and an operation's payload once when it is its entity's data
// (rowcodec.go, payloadref.go); it reads version 2's JSON rows as they
// are. Version 4 records the app that made an operation (Operation.App)
// and counts operations per app and per account and entity type; Open
// builds those counts in an older file. Version 5 keeps the unfinished
// index as bitmaps of 1,024 seqs (unfinishedset.go) instead of a key per
// operation; Open converts version 4's. Version 6 stores the events of
// one write in one row (eventcodec.go, rowGroup), and reads version 5's
// rows, an event each, as they are; and it lists a partition's
// unfinished operations in its entity's row (entUnfinished) instead of
// the partitions bucket, which Open moves there (upgradePartitions).
const schemaVersion = 6

// bucketPartitionsV5 is the index of each partition's unfinished
// operations up to schema 5 (account\0type\0id\0seq → empty, in order).
var bucketPartitionsV5 = []byte("partitions")

// accountCountKey is the key of an account's count of operations in a
// state. It starts with NUL, so it never equals a state's own key.
func accountCountKey(account string, st State) []byte {
	return []byte("\x00" + account + "\x00" + string(st))
}

// appCountKey is the key of an app's count of operations in a state.
func appCountKey(app string, st State) []byte {
	return []byte("\x01" + app + "\x00" + string(st))
}

// typeCountKey is the key of the count of an account's operations of
// one entity type in a state.
func typeCountKey(account, entityType string, st State) []byte {
	return []byte("\x02" + account + "\x00" + entityType + "\x00" + string(st))
}

// countKeys returns every count an operation in state st is part of:
// all operations, its account's, its account's of its entity type, and
// its app's when an app made it. The shares' keys start below ' ', so
// they never equal a state's own key.
func countKeys(op *Operation, st State) [][]byte {
	keys := make([][]byte, countKeyN(op))
	for i := range keys {
		keys[i] = appendCountKey(nil, op, st, i)
	}
	return keys
}

// countKeyN is the number of counts an operation is part of (countKeys).
func countKeyN(op *Operation) int {
	if op.App != "" {
		return 4
	}
	return 3
}

// appendCountKey appends the key of countKeys(op, st)[i] to dst.
func appendCountKey(dst []byte, op *Operation, st State, i int) []byte {
	switch i {
	case 0:
		return append(dst, st...)
	case 1:
		dst = append(append(append(dst, 0), op.AccountID...), 0)
	case 2:
		dst = append(append(append(dst, 2), op.AccountID...), 0)
		dst = append(append(dst, op.EntityType...), 0)
	default:
		dst = append(append(append(dst, 1), op.App...), 0)
	}
	return append(dst, st...)
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

func readU64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// timeKey encodes t as unix nanoseconds, clamped at zero so it sorts.
func timeKey(t time.Time) uint64 {
	n := t.UnixNano()
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// timeSeqKey is the 16-byte key of the ready, lease and done indexes.
func timeSeqKey(t time.Time, seq uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, timeKey(t))
	binary.BigEndian.PutUint64(b[8:], seq)
	return b
}

func splitTimeSeqKey(k []byte) (time.Time, uint64) {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k))), binary.BigEndian.Uint64(k[8:])
}

func partitionKey(account, entityType, entityID string) string {
	return account + "\x00" + entityType + "\x00" + entityID
}

// entityKey is the key of an entity row; it equals its partition key.
func entityKey(account, entityType, entityID string) []byte {
	return appendPartitionKey(make([]byte, 0, len(account)+len(entityType)+len(entityID)+2), account, entityType, entityID)
}

// appendPartitionKey appends partitionKey(account, entityType, entityID)
// to dst.
func appendPartitionKey(dst []byte, account, entityType, entityID string) []byte {
	dst = append(append(dst, account...), 0)
	dst = append(append(dst, entityType...), 0)
	return append(dst, entityID...)
}

// splitEntityKey reverses entityKey.
func splitEntityKey(k []byte) (account, entityType, entityID string, ok bool) {
	parts := strings.SplitN(string(k), "\x00", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
