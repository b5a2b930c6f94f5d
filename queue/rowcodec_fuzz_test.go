package queue

import (
	"encoding/binary"
	"errors"
	"testing"
)

// A row holding a value the writer never writes is refused when read:
// read and written again it would say something else (FuzzDecodeRow
// found the first: a server record at version -25, written back as 1).
func TestDecodeRowRefusesWhatIsNeverWritten(t *testing.T) {
	t.Parallel()
	type field struct {
		bit int
		val []byte
	}
	row := func(fields ...field) []byte {
		var present uint64
		var b []byte
		for _, f := range fields {
			present |= 1 << f.bit
			b = append(b, f.val...)
		}
		return append(binary.AppendUvarint([]byte{rowV1}, present), b...)
	}
	varint := func(x int64) []byte { return binary.AppendVarint(nil, x) }
	uvarint := func(xs ...uint64) (b []byte) {
		for _, x := range xs {
			b = binary.AppendUvarint(b, x)
		}
		return b
	}
	raw := func(s string) []byte { return append(append([]byte{strRaw}, uvarint(uint64(len(s)))...), s...) }
	enumRawOf := func(s string) []byte { return append(append([]byte{enumRaw}, uvarint(uint64(len(s)))...), s...) }
	created := field{entCreatedAt, append(varint(1_700_000_000), uvarint(5)...)}
	for _, tc := range []struct {
		name string
		row  []byte
	}{
		{"server version negative", row(field{entServerRecVersion, varint(-25)})},
		{"server version zero", row(field{entServerRecVersion, varint(0)})},
		{"server deleted without a version", row(field{entServerRecDeleted, nil})},
		{"server data without a version", row(field{entServerRecData, append(uvarint(2), "{}"...)})},
		{"server id without a version", row(field{entServerRecID, raw("s1")})},
		{"server missing without a version", row(field{entServerRecMissing, raw("too_large")})},
		{"version present but zero", row(field{entVersion, varint(0)})},
		{"data present but empty", row(field{entData, uvarint(0)})},
		{"string present but empty", row(field{entSyncError, raw("")})},
		{"raw string in UUID form", row(field{entServerID, raw("9b2d4e6f-1a3c-4e5f-8a7b-0c1d2e3f4a5b")})},
		{"raw string in hex form", row(field{entServerID, raw("0123456789abcdef")})},
		{"hex string too short", row(field{entServerID, append([]byte{strHex}, uvarint(2, 0xab, 0xcd)...)})},
		{"raw enum of a table value", row(field{entSyncState, enumRawOf(string(SyncSynced))})},
		{"raw enum empty", row(field{entSyncState, enumRawOf("")})},
		{"nanoseconds over a second", row(field{entCreatedAt, append(varint(1), uvarint(1e9)...)})},
		{"the zero time", row(field{entCreatedAt, append(varint(-62135596800), uvarint(0)...)})},
		{"odd offset", row(created, field{entUpdatedAt, uvarint(3)})},
		{"offset too large", row(created, field{entUpdatedAt, uvarint(1 << 63)})},
		{"absolute time nanoseconds over a second", row(created, field{entUpdatedAt, append(uvarint(1), append(varint(1), uvarint(2e9)...)...)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := entityKey("acct", "note", "e1")
			if e, _, err := decodeEntityRow(k, tc.row, false); !errors.Is(err, errRow) {
				t.Errorf("decodeEntityRow(%x) = %+v, %v; want errRow", tc.row, e, err)
			}
			if _, _, err := entityDataRefs(tc.row); !errors.Is(err, errRow) {
				t.Errorf("entityDataRefs(%x): %v; want errRow", tc.row, err)
			}
		})
	}
	// The same for an operation's fields.
	for _, tc := range []struct {
		name string
		row  []byte
	}{
		{"attempt count present but zero", row(field{opAttemptCount, varint(0)})},
		{"payload present but empty", row(field{opPayload, uvarint(0)})},
		{"raw state of a table value", row(field{opState, enumRawOf(string(StateDone))})},
		{"raw id in UUID form", row(field{opID, raw("9b2d4e6f-1a3c-4e5f-8a7b-0c1d2e3f4a5b")})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if op, _, err := decodeOp(7, tc.row); !errors.Is(err, errRow) {
				t.Errorf("decodeOp(%x) = %+v, %v; want errRow", tc.row, op, err)
			}
		})
	}
}
