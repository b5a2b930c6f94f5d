package queue

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The rows of the entities and ops buckets are stored in a compact binary
// form (schema 3). Schema 2 stored them as JSON, 370 and 610 bytes for a
// small create against 150 and 250 now; a row in JSON (its first byte is
// '{') is still read, and written in the binary form the next time it
// changes.
//
// A row is a format byte (rowV1), a uvarint bitmap of the fields present,
// then those fields in bit order. A field is present when it is not its
// type's zero value; a bool is its bit alone. Values:
//
//   - integers: varint (zig-zag);
//   - bytes: uvarint length, then the bytes;
//   - strings: a form byte, then: the string as bytes (strForm raw); 16
//     bytes for a UUID in its canonical lowercase text (strForm UUID);
//     the bytes of an even-length lowercase hex string (strForm hex, as a
//     SHA-256 fingerprint is);
//   - enums (state, operation type, sync state): one byte, the value's
//     index in its table, or enumRaw followed by the value as a string,
//     so a value the table lacks still round-trips;
//   - times: the first one written (CreatedAt) as a varint of Unix
//     seconds and a uvarint of nanoseconds; each later one relative to
//     it: a uvarint of the zig-zag offset in nanoseconds shifted left by
//     one, or, when the offset does not fit, 1 followed by the absolute
//     form. Times read back in UTC.
//
// An entity row leaves out its account, type and id: they are its key.
// An operation row leaves out its seq (its key), and its payload when it
// is the data of its entity's row (see payloadref.go).

const rowV1 = 0x01

// Entity fields, in the order they are written.
const (
	entCreatedAt = iota
	entData
	entDeleted
	entSyncState
	entServerID
	entSyncError
	entVersion
	entUpdatedAt
	entLastOperationID
	entSyncedOperationID
	entPayloadRefs // seqs of operations whose payload is this row's data
	entServerVersion
	entServerRecVersion // Entity.Server, present when entServerRecVersion is
	entServerRecDeleted
	entServerRecData
	entServerRecID // Entity.Server.ID, when another record than ServerID
	entUnbased
	entServerRecMissing
	entSyncCode
	entServerRecPaths // Entity.Server.Paths, a JSON array
	entServerRecBase  // Entity.Server.Base
	entUnfinished     // seqs of the partition's unfinished operations, in order (schema 6); the last field
	entFields
)

// Operation fields, in the order they are written.
const (
	opCreatedAt = iota
	opID
	opAccountID
	opType
	opEntityType
	opEntityID
	opPayloadVersion
	opPayload
	opPayloadFingerprint
	opState
	opAttemptCount
	opNextAttemptAt
	opLeaseOwner
	opLeaseExpiresAt
	opLastErrorCode
	opLastError
	opCompletedAt
	opUserRetriedAt
	opRequestFingerprint
	opDeclined
	opRemoteKey
	opMaybeApplied
	opMergedInto
	opPayloadInEntity // the payload is the entity row's data
	opAfter
	opApp
	opPaths // Operation.Paths, a JSON array
	opFields
)

// The enum tables. Append only: an index, once written, keeps its value.
var (
	stateTable     = []string{string(StatePending), string(StateSending), string(StateRetryWaiting), string(StateDone), string(StatePermanentFailed)}
	opTypeTable    = []string{string(OpCreate), string(OpUpdate), string(OpDelete)}
	syncStateTable = []string{string(SyncPending), string(SyncSynced), string(SyncFailed), string(SyncConflict), string(SyncStale)}
)

const (
	strRaw  = 0
	strUUID = 1
	strHex  = 2
	enumRaw = 0xff
)

var errRow = errors.New("queue: malformed row")

// rowWriter builds one row.
type rowWriter struct {
	b       []byte
	present uint64
	base    time.Time // the first time written
}

// rowHeadRoom is the room newRowWriter keeps before the fields for the
// format byte and the bitmap (a uvarint of at most 10 bytes), so finish
// writes them in place instead of copying the row behind them.
const rowHeadRoom = 1 + binary.MaxVarintLen64

// newRowWriter returns a writer whose row has room for size bytes of
// fields.
func newRowWriter(size int) *rowWriter {
	return &rowWriter{b: make([]byte, rowHeadRoom, rowHeadRoom+size)}
}

func (w *rowWriter) has(field int) { w.present |= 1 << field }

func (w *rowWriter) uvarint(x uint64) { w.b = binary.AppendUvarint(w.b, x) }

func (w *rowWriter) int(field int, x int64) {
	if x != 0 {
		w.has(field)
		w.b = binary.AppendVarint(w.b, x)
	}
}

func (w *rowWriter) bool(field int, x bool) {
	if x {
		w.has(field)
	}
}

func (w *rowWriter) bytes(field int, p []byte) {
	if len(p) > 0 {
		w.has(field)
		w.uvarint(uint64(len(p)))
		w.b = append(w.b, p...)
	}
}

func (w *rowWriter) str(field int, s string) {
	if s == "" {
		return
	}
	w.has(field)
	if u, ok := packUUID(s); ok {
		w.b = append(w.b, strUUID)
		w.b = append(w.b, u[:]...)
		return
	}
	if isHexForm(s) {
		w.b = append(w.b, strHex)
		w.uvarint(uint64(len(s) / 2))
		w.b, _ = hex.AppendDecode(w.b, []byte(s)) // isLowerHex: no error
		return
	}
	w.b = append(w.b, strRaw)
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *rowWriter) enum(field int, s string, table []string) {
	if s == "" {
		return
	}
	w.has(field)
	for i, v := range table {
		if v == s {
			w.b = append(w.b, byte(i))
			return
		}
	}
	w.b = append(w.b, enumRaw)
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// time writes t; the first call sets the base of the later ones.
func (w *rowWriter) time(field int, t time.Time) {
	if t.IsZero() {
		return
	}
	w.has(field)
	t = t.Round(0) // the wall clock only, as a time read back has
	if w.base.IsZero() {
		w.base = t
		w.b = binary.AppendVarint(w.b, t.Unix())
		w.uvarint(uint64(t.Nanosecond()))
		return
	}
	// t.Sub saturates when the offset overflows; Add then misses t.
	if d := t.Sub(w.base); d > -1<<61 && d < 1<<61 && w.base.Add(d).Equal(t) {
		z := uint64(d<<1) ^ uint64(d>>63) // zig-zag, below 1<<62
		w.uvarint(z << 1)
		return
	}
	w.uvarint(1)
	w.b = binary.AppendVarint(w.b, t.Unix())
	w.uvarint(uint64(t.Nanosecond()))
}

// finish returns the row: the format byte and the bitmap, then the
// fields.
func (w *rowWriter) finish() []byte {
	var head [rowHeadRoom]byte
	head[0] = rowV1
	n := 1 + binary.PutUvarint(head[1:], w.present)
	start := rowHeadRoom - n
	copy(w.b[start:], head[:n])
	return w.b[start:]
}

// rowReader reads one row; the first error sticks.
type rowReader struct {
	b       []byte
	present uint64
	base    time.Time
	err     error
	alias   bool // bytes returns slices of the row instead of copies
}

func newRowReader(v []byte, fields int) *rowReader {
	r := &rowReader{b: v[1:]}
	r.present = r.uvarint()
	if r.err == nil && r.present>>fields != 0 {
		r.err = fmt.Errorf("%w: unknown fields %#x (written by a newer syncd?)", errRow, r.present>>fields)
	}
	return r
}

func (r *rowReader) fail() {
	if r.err == nil {
		r.err = errRow
	}
	r.b = nil
}

func (r *rowReader) is(field int) bool { return r.err == nil && r.present&(1<<field) != 0 }

func (r *rowReader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *rowReader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *rowReader) take(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *rowReader) int(field int) int64 {
	if !r.is(field) {
		return 0
	}
	x := r.varint()
	if x == 0 {
		r.fail() // a zero is left out, never written
	}
	return x
}

// bytes returns a copy (a bbolt value is valid only in its transaction),
// or with alias set a slice of the row.
func (r *rowReader) bytes(field int) []byte {
	if !r.is(field) {
		return nil
	}
	p := r.take(r.uvarint())
	if len(p) == 0 {
		r.fail() // empty bytes are left out, never written
		return nil
	}
	if r.alias {
		return p
	}
	return append([]byte(nil), p...)
}

func (r *rowReader) str(field int) string {
	if !r.is(field) {
		return ""
	}
	form := r.take(1)
	if form == nil {
		return ""
	}
	switch form[0] {
	case strRaw:
		if p := r.take(r.uvarint()); rawForm(p) {
			return string(p)
		}
		// Empty, or a string the writer gives another form.
	case strUUID:
		p := r.take(16)
		if p == nil {
			return ""
		}
		return unpackUUID(p)
	case strHex:
		if p := r.take(r.uvarint()); hexForm(p) {
			return hex.EncodeToString(p)
		}
	}
	r.fail()
	return ""
}

// isHexForm reports whether the writer stores s, not a UUID, in strForm
// hex.
func isHexForm(s string) bool { return len(s) >= 16 && len(s)%2 == 0 && isLowerHex(s) }

// rawForm reports whether the writer stores the string p in strForm raw:
// neither empty nor of the UUID or hex form.
func rawForm(p []byte) bool {
	return len(p) > 0 && !isUUIDText(p) && !(len(p) >= 16 && len(p)%2 == 0 && isLowerHex(p))
}

// hexForm reports whether p, the bytes of a strForm hex, are those of a
// string the writer stores so: at least 8 bytes, and not a UUID's text
// (a UUID has a dash, so hex digits alone are never one).
func hexForm(p []byte) bool { return len(p) >= 8 }

// isUUIDText reports whether s is a UUID in canonical lowercase text.
func isUUIDText[S ~string | ~[]byte](s S) bool {
	return len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
		isLowerHex(s[0:8]) && isLowerHex(s[9:13]) && isLowerHex(s[14:18]) && isLowerHex(s[19:23]) && isLowerHex(s[24:36])
}

func (r *rowReader) enum(field int, table []string) string {
	if !r.is(field) {
		return ""
	}
	p := r.take(1)
	switch {
	case p == nil:
		return ""
	case p[0] == enumRaw:
		if p := r.take(r.uvarint()); rawEnum(p, table) {
			return string(p)
		}
		// Empty, or a value of the table: the writer gives its index.
	case int(p[0]) < len(table):
		return table[p[0]]
	}
	r.fail()
	return ""
}

func (r *rowReader) time(field int) time.Time {
	if !r.is(field) {
		return time.Time{}
	}
	if r.base.IsZero() {
		r.base = r.absTime()
		return r.base
	}
	z := r.uvarint()
	if z == 1 {
		return r.absTime()
	}
	if z&1 != 0 || z>>1 >= 1<<62 {
		r.fail() // the writer's offsets are even and below 1<<63
		return time.Time{}
	}
	z >>= 1
	d := time.Duration(z>>1) ^ -time.Duration(z&1)
	t := r.base.Add(d)
	if t.IsZero() {
		r.fail()
	}
	return t
}

// absTime reads a time in the absolute form: seconds and nanoseconds,
// the nanoseconds below a second and the time not zero, as written.
func (r *rowReader) absTime() time.Time {
	sec, nsec := r.varint(), r.uvarint()
	if r.err != nil || nsec >= 1e9 {
		r.fail()
		return time.Time{}
	}
	t := time.Unix(sec, int64(nsec)).UTC()
	if t.IsZero() {
		r.fail()
	}
	return t
}

// done reports the first error, or one for bytes left over.
func (r *rowReader) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the last field", errRow, len(r.b))
	}
	return r.err
}

// packUUID returns the 16 bytes of s when s is a UUID in canonical
// lowercase text, the form that unpackUUID gives back.
func packUUID(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if !isLowerHex(h) {
		return u, false
	}
	hex.Decode(u[:], []byte(h))
	return u, true
}

func unpackUUID(p []byte) string {
	h := hex.EncodeToString(p)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func isLowerHex[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// encodeEntity returns e's row; refs are the seqs of the operations whose
// payload is e's data (payloadref.go).
func encodeEntity(e *Entity, refs []uint64) []byte {
	return encodeEntityRow(e, refs, nil)
}

// encodeEntityRow returns e's row, listing refs (payload references) and
// unfinished (the seqs of its partition's unfinished operations, in
// order).
func encodeEntityRow(e *Entity, refs, unfinished []uint64) []byte {
	w := newRowWriter(64 + len(e.Data) + 2*len(unfinished))
	w.time(entCreatedAt, e.CreatedAt)
	w.bytes(entData, e.Data)
	w.bool(entDeleted, e.Deleted)
	w.enum(entSyncState, string(e.SyncState), syncStateTable)
	w.str(entServerID, e.ServerID)
	w.str(entSyncError, e.SyncError)
	w.int(entVersion, e.Version)
	w.time(entUpdatedAt, e.UpdatedAt)
	w.str(entLastOperationID, e.LastOperationID)
	w.str(entSyncedOperationID, e.SyncedOperationID)
	if len(refs) > 0 {
		w.has(entPayloadRefs)
		w.uvarint(uint64(len(refs)))
		for _, seq := range refs {
			w.uvarint(seq)
		}
	}
	w.int(entServerVersion, e.ServerVersion)
	if e.Server != nil {
		// Version 0 would read back as no Server: written as is, a
		// server's version is at least 1.
		w.int(entServerRecVersion, max(e.Server.Version, 1))
		w.bool(entServerRecDeleted, e.Server.Deleted)
		w.bytes(entServerRecData, e.Server.Data)
		w.str(entServerRecID, e.Server.ID)
	}
	w.bool(entUnbased, e.Unbased)
	if e.Server != nil {
		w.str(entServerRecMissing, e.Server.Missing)
	}
	w.str(entSyncCode, e.SyncCode)
	if e.Server != nil {
		w.bytes(entServerRecPaths, pathsRow(e.Server.Paths))
		w.bytes(entServerRecBase, e.Server.Base)
	}
	w.seqs(entUnfinished, unfinished)
	return w.finish()
}

// seqs writes an ascending list of seqs: its length, the first, then
// each one's distance from the one before.
func (w *rowWriter) seqs(field int, list []uint64) {
	if len(list) == 0 {
		return
	}
	w.has(field)
	w.b = appendSeqs(w.b, list)
}

func appendSeqs(b []byte, list []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(list)))
	prev := uint64(0)
	for _, seq := range list {
		b = binary.AppendUvarint(b, seq-prev)
		prev = seq
	}
	return b
}

// seqs reads a list written by rowWriter.seqs, refusing one that is not
// ascending.
func (r *rowReader) seqs(field int) []uint64 {
	if !r.is(field) {
		return nil
	}
	n := r.uvarint()
	if n == 0 || n > uint64(len(r.b)) { // each takes a byte at least
		r.fail()
		return nil
	}
	list := make([]uint64, 0, n)
	prev := uint64(0)
	for range n {
		d := r.uvarint()
		if d == 0 || prev+d < prev {
			r.fail()
			return nil
		}
		prev += d
		list = append(list, prev)
	}
	return list
}

// withUnfinished returns the binary entity row v with its list of
// unfinished operations replaced by list, the other fields as they are.
// tail is where the list starts in v (entityRowParts).
func withUnfinished(v []byte, tail int, list []uint64) []byte {
	present, n := binary.Uvarint(v[1:])
	if len(list) == 0 {
		present &^= 1 << entUnfinished
	} else {
		present |= 1 << entUnfinished
	}
	out := make([]byte, 0, tail+binary.MaxVarintLen64+binary.MaxVarintLen64*(len(list)+1))
	out = binary.AppendUvarint(append(out, rowV1), present)
	out = append(out, v[1+n:tail]...)
	if len(list) > 0 {
		out = appendSeqs(out, list)
	}
	return out
}

// pathsRow is a list of paths as a row stores it: a JSON array, nil for
// a nil list.
func pathsRow(paths []string) []byte {
	if paths == nil {
		return nil
	}
	b, _ := json.Marshal(paths)
	return b
}

// readPaths reads a list of paths pathsRow wrote.
func (r *rowReader) paths(field int) []string {
	b := r.bytes(field)
	if b == nil {
		return nil
	}
	paths := []string{}
	if err := json.Unmarshal(b, &paths); err != nil {
		r.fail()
		return nil
	}
	return paths
}

// decodeEntity reads the row v stored under key k, in either form.
func decodeEntity(k, v []byte) (*Entity, error) {
	e, _, err := decodeEntityRow(k, v, false)
	return e, err
}

// decodeEntityRow reads the row v stored under key k, in either form, and
// the seqs of the operations whose payload is its data. With alias set,
// the data of a binary row is a slice of v.
func decodeEntityRow(k, v []byte, alias bool) (e *Entity, refs []uint64, err error) {
	e = new(Entity)
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, e); err != nil {
			return nil, nil, fmt.Errorf("queue: decode entity %q: %w", k, err)
		}
		return e, nil, nil
	}
	if len(v) == 0 || v[0] != rowV1 {
		return nil, nil, fmt.Errorf("queue: decode entity %q: %w: format %#x", k, errRow, firstByte(v))
	}
	var ok bool
	if e.AccountID, e.Type, e.ID, ok = splitEntityKey(k); !ok {
		return nil, nil, fmt.Errorf("queue: decode entity %q: %w: bad key", k, errRow)
	}
	r := newRowReader(v, entFields)
	r.alias = alias
	e.CreatedAt = r.time(entCreatedAt)
	e.Data = r.bytes(entData)
	e.Deleted = r.is(entDeleted)
	e.SyncState = SyncState(r.enum(entSyncState, syncStateTable))
	e.ServerID = r.str(entServerID)
	e.SyncError = r.str(entSyncError)
	e.Version = r.int(entVersion)
	e.UpdatedAt = r.time(entUpdatedAt)
	e.LastOperationID = r.str(entLastOperationID)
	e.SyncedOperationID = r.str(entSyncedOperationID)
	refs = r.refs(entPayloadRefs)
	e.ServerVersion = r.int(entServerVersion)
	r.checkServerRec()
	if r.is(entServerRecVersion) {
		e.Server = &ServerState{Version: r.int(entServerRecVersion)}
		e.Server.Deleted = r.is(entServerRecDeleted)
		if data := r.bytes(entServerRecData); len(data) > 0 {
			e.Server.Data = bytes.Clone(data)
		}
		e.Server.ID = r.str(entServerRecID)
	}
	e.Unbased = r.is(entUnbased)
	if e.Server != nil {
		e.Server.Missing = r.str(entServerRecMissing)
	}
	e.SyncCode = r.str(entSyncCode)
	if e.Server != nil {
		e.Server.Paths = r.paths(entServerRecPaths)
		if base := r.bytes(entServerRecBase); len(base) > 0 {
			e.Server.Base = bytes.Clone(base)
		}
	}
	r.seqs(entUnfinished) // read by entityRowParts
	if err := r.done(); err != nil {
		return nil, nil, fmt.Errorf("queue: decode entity %q: %w", k, err)
	}
	return e, refs, nil
}

// entityDataRefs returns a binary entity row's data (a slice of v) and
// payload references, skipping the other fields without decoding them:
// the write path reads them at every saveOp.
func entityDataRefs(v []byte) (data []byte, refs []uint64, err error) {
	data, refs, _, _, err = entityRowParts(v)
	return data, refs, err
}

// entityRowParts returns a binary entity row's data (a slice of v),
// payload references, the seqs of its partition's unfinished operations
// and where in v their list starts (len(v) without one).
func entityRowParts(v []byte) (data []byte, refs, unfinished []uint64, tail int, err error) {
	r := newRowReader(v, entFields)
	r.alias = true
	r.time(entCreatedAt)
	data = r.bytes(entData)
	r.skipEnum(entSyncState, syncStateTable)
	r.skipStr(entServerID)
	r.skipStr(entSyncError)
	r.int(entVersion)
	r.time(entUpdatedAt)
	r.skipStr(entLastOperationID)
	r.skipStr(entSyncedOperationID)
	refs = r.refs(entPayloadRefs)
	r.int(entServerVersion)
	r.checkServerRec()
	r.int(entServerRecVersion)
	r.bytes(entServerRecData)
	r.skipStr(entServerRecID)
	r.skipStr(entServerRecMissing)
	r.skipStr(entSyncCode)
	r.bytes(entServerRecPaths)
	r.bytes(entServerRecBase)
	tail = len(v) - len(r.b)
	unfinished = r.seqs(entUnfinished)
	return data, refs, unfinished, tail, r.done()
}

// checkServerRec refuses what the writer never writes of an entity's
// Server record: its other fields without its version, which is at
// least 1 (a version below would read back as 1). Call it before the
// version is read.
func (r *rowReader) checkServerRec() {
	const rest = 1<<entServerRecDeleted | 1<<entServerRecData | 1<<entServerRecID | 1<<entServerRecMissing |
		1<<entServerRecPaths | 1<<entServerRecBase
	if r.err != nil {
		return
	}
	if !r.is(entServerRecVersion) {
		if r.present&rest != 0 {
			r.err = fmt.Errorf("%w: server record fields without its version", errRow)
		}
		return
	}
	if v, n := binary.Varint(r.b); n > 0 && v < 1 {
		r.err = fmt.Errorf("%w: server record version %d", errRow, v)
	}
}

func (r *rowReader) skipStr(field int) {
	if !r.is(field) {
		return
	}
	switch form := r.take(1); {
	case form == nil:
	case form[0] == strUUID:
		r.take(16)
	case form[0] == strRaw:
		if !rawForm(r.take(r.uvarint())) {
			r.fail()
		}
	case form[0] == strHex:
		if !hexForm(r.take(r.uvarint())) {
			r.fail()
		}
	default:
		r.fail()
	}
}

func (r *rowReader) skipEnum(field int, table []string) {
	if !r.is(field) {
		return
	}
	switch p := r.take(1); {
	case p == nil:
	case p[0] == enumRaw:
		if !rawEnum(r.take(r.uvarint()), table) {
			r.fail()
		}
	case int(p[0]) >= len(table):
		r.fail()
	}
}

// rawEnum reports whether the writer stores p as a raw enum value: not
// empty and not in table.
func rawEnum(p []byte, table []string) bool {
	if len(p) == 0 {
		return false
	}
	for _, v := range table {
		if v == string(p) {
			return false
		}
	}
	return true
}

// refs reads a list of seqs.
func (r *rowReader) refs(field int) []uint64 {
	if !r.is(field) {
		return nil
	}
	n := r.uvarint()
	if n == 0 || n > uint64(len(r.b)) { // each takes a byte at least
		r.fail()
		return nil
	}
	refs := make([]uint64, 0, n)
	for range n {
		refs = append(refs, r.uvarint())
	}
	return refs
}

// encodeOp returns op's row; inEntity leaves out the payload, which is
// the data of the entity's row.
func encodeOp(op *Operation, inEntity bool) []byte {
	w := newRowWriter(128 + len(op.Payload))
	w.time(opCreatedAt, op.CreatedAt)
	w.str(opID, op.ID)
	w.str(opAccountID, op.AccountID)
	w.enum(opType, string(op.Type), opTypeTable)
	w.str(opEntityType, op.EntityType)
	w.str(opEntityID, op.EntityID)
	w.int(opPayloadVersion, op.PayloadVersion)
	if !inEntity {
		w.bytes(opPayload, op.Payload)
	}
	w.str(opPayloadFingerprint, op.PayloadFingerprint)
	w.enum(opState, string(op.State), stateTable)
	w.int(opAttemptCount, int64(op.AttemptCount))
	w.time(opNextAttemptAt, op.NextAttemptAt)
	w.str(opLeaseOwner, op.LeaseOwner)
	w.time(opLeaseExpiresAt, op.LeaseExpiresAt)
	w.str(opLastErrorCode, op.LastErrorCode)
	w.str(opLastError, op.LastError)
	w.time(opCompletedAt, op.CompletedAt)
	w.time(opUserRetriedAt, op.UserRetriedAt)
	w.str(opRequestFingerprint, op.RequestFingerprint)
	w.bool(opDeclined, op.Declined)
	w.str(opRemoteKey, op.RemoteKey)
	w.bool(opMaybeApplied, op.MaybeApplied)
	w.str(opMergedInto, op.MergedInto)
	w.bool(opPayloadInEntity, inEntity)
	w.str(opAfter, op.After)
	w.str(opApp, op.App)
	w.bytes(opPaths, pathsRow(op.Paths))
	return w.finish()
}

// decodeOp reads the row v of the operation seq, in either form.
// inEntity reports that the row left its payload out: it is the data of
// the entity's row, which the caller fills in.
func decodeOp(seq uint64, v []byte) (op *Operation, inEntity bool, err error) {
	op = new(Operation)
	if len(v) > 0 && v[0] == '{' {
		if err := json.Unmarshal(v, op); err != nil {
			return nil, false, fmt.Errorf("queue: decode operation %d: %w", seq, err)
		}
		return op, false, nil
	}
	if len(v) == 0 || v[0] != rowV1 {
		return nil, false, fmt.Errorf("queue: decode operation %d: %w: format %#x", seq, errRow, firstByte(v))
	}
	r := newRowReader(v, opFields)
	op.Seq = seq
	op.CreatedAt = r.time(opCreatedAt)
	op.ID = r.str(opID)
	op.AccountID = r.str(opAccountID)
	op.Type = OpType(r.enum(opType, opTypeTable))
	op.EntityType = r.str(opEntityType)
	op.EntityID = r.str(opEntityID)
	op.PayloadVersion = r.int(opPayloadVersion)
	op.Payload = r.bytes(opPayload)
	op.PayloadFingerprint = r.str(opPayloadFingerprint)
	op.State = State(r.enum(opState, stateTable))
	op.AttemptCount = int(r.int(opAttemptCount))
	op.NextAttemptAt = r.time(opNextAttemptAt)
	op.LeaseOwner = r.str(opLeaseOwner)
	op.LeaseExpiresAt = r.time(opLeaseExpiresAt)
	op.LastErrorCode = r.str(opLastErrorCode)
	op.LastError = r.str(opLastError)
	op.CompletedAt = r.time(opCompletedAt)
	op.UserRetriedAt = r.time(opUserRetriedAt)
	op.RequestFingerprint = r.str(opRequestFingerprint)
	op.Declined = r.is(opDeclined)
	op.RemoteKey = r.str(opRemoteKey)
	op.MaybeApplied = r.is(opMaybeApplied)
	op.MergedInto = r.str(opMergedInto)
	inEntity = r.is(opPayloadInEntity)
	op.After = r.str(opAfter)
	op.App = r.str(opApp)
	op.Paths = r.paths(opPaths)
	if inEntity && r.is(opPayload) {
		r.err = fmt.Errorf("%w: a payload both in the row and in the entity's", errRow)
	}
	if err := r.done(); err != nil {
		return nil, false, fmt.Errorf("queue: decode operation %d: %w", seq, err)
	}
	return op, inEntity, nil
}

func firstByte(v []byte) any {
	if len(v) == 0 {
		return "none"
	}
	return v[0]
}
