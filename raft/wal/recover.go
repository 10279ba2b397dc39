package wal

import (
	"encoding/binary"
	"fmt"
)

// What Open makes of damage in the last segment.
//
// A batch is one write and one fdatasync, and the next batch starts only after that
// fdatasync returned, so a power loss can damage only the batch being written, and
// only the way a disk loses an unfinished write: the file ends early, or whole
// 512-byte sectors of the batch read as zeros (writeback goes out of order, so a
// zeroed sector may sit between written ones). Anything else is damage to data that
// was on disk: a flipped bit, garbage, a lost sector in a batch that others followed.
//
// judgeDamage tells the two apart for the first bad record at offset d. It calls the
// damage a torn write — Open cuts it off — only if all of these hold:
//
//  1. The bad record at d looks unfinished: its length field is zero; or the file
//     ends inside it, its index field (when present and not zeroed) is the one that
//     belongs there, and the bytes up to the end of the file are not a whole record
//     whose length field alone is wrong; or the file holds all of it and one of the
//     sectors it touches reads as zeros from d or the sector's start to the sector's
//     end or the end of the file (see lostSector).
//  2. It does not end a batch with bytes after it (its appendedAt mark, when
//     readable): such a batch was followed by another write, so it was acknowledged.
//  3. No good record after d ends a batch with bytes after it, and none is a record of
//     a release before the marks (each of those is a batch of its own); no good
//     record at all follows one the file ends inside.
//
// Example: batch 11..20 is being written when the power fails. The sector holding
// 14..16 was never written and reads as zeros; 17..20 were. Record 14 fails its
// checksum with a zeroed sector in it (1), is not a batch end (2), and after it only
// 17..19 (mid-batch) and 20 (the batch's end, at the end of the file) are good (3):
// a torn write, cut at 14; 11..13 stay, as if the batch were acknowledged and the
// answer lost. Had batch 21 followed 20 in the file, 20 would end a batch with bytes
// after it: the batch was acknowledged, and Open refuses.
//
// What this cannot see: damage that zeroes a record's first 27 bytes and everything
// after it hides whether that record ended a batch; and a lost sector combined with a
// flipped bit in a later record of the same batch. Both are cut as torn writes.
// Every test of these rules is in crash_test.go and regress_test.go.

// sectorSize is the unit a disk writes whole.
const sectorSize = 512

// minZeroRun is the shortest all-zero stretch of a sector taken as a lost sector.
const minZeroRun = 8

// judgeDamage returns "" when the damage at d in data (the last segment) is a torn
// write, or why it is not. next is the index the record at d should hold and
// lastTerm the term of the good record before it (0 for none).
func judgeDamage(data []byte, d int64, next, lastTerm uint64) string {
	n := int64(len(data))
	rec := data[d:]
	pastEOF := false
	switch {
	case len(rec) < 4:
		return "" // the file ends inside a length field
	case binary.LittleEndian.Uint32(rec) == 0:
		// A zeroed length field: a sector that was never written.
	default:
		size := int64(binary.LittleEndian.Uint32(rec))
		if size < payloadFixed || size > MaxRecordBytes {
			return fmt.Sprintf("a record length of %d is neither a record nor zeros", size)
		}
		end := d + recordHeader + size
		if m, ok := peekMark(rec); ok && m.end && end < n {
			return fmt.Sprintf("the record at offset %d ends a batch and %d bytes follow it: that batch "+
				"was acknowledged", d, n-end)
		}
		if len(rec) >= recordHeader+8 {
			if idx := binary.LittleEndian.Uint64(rec[recordHeader:]); idx != 0 && idx != next {
				return fmt.Sprintf("the record at offset %d holds index %d where %d belongs", d, idx, next)
			}
		}
		if end > n {
			pastEOF = true
			if completeAt(rec) {
				return fmt.Sprintf("the record at offset %d is whole up to the end of the file, but its "+
					"length field is damaged", d)
			}
		} else if !lostSector(data, d, d, end) {
			return fmt.Sprintf("the record at offset %d fails its checksum although the file holds all "+
				"of it and none of its sectors reads as zeros: damaged after it was written", d)
		}
	}
	return goodRecordAfter(data, d, next, lastTerm, pastEOF)
}

// completeAt tells whether rec, from its header to the end, is one good record with a
// wrong length field.
func completeAt(rec []byte) bool {
	if len(rec) < minRecordBytes {
		return false
	}
	fixed := make([]byte, len(rec))
	copy(fixed, rec)
	binary.LittleEndian.PutUint32(fixed, uint32(len(rec)-recordHeader))
	_, _, problem := decodeRecord(fixed)
	return problem == ""
}

// lostSector tells whether one of the sectors that [from, to) touches reads as zeros
// from max(d, the sector's start) to the sector's end or the end of the file. Zeros
// that reach the end of the file always count (a marked record never ends in a zero
// byte); a stretch that starts at d and ends inside the file counts only from
// minZeroRun bytes on.
func lostSector(data []byte, d, from, to int64) bool {
	n := int64(len(data))
	for s := from / sectorSize * sectorSize; s < to; s += sectorSize {
		lo, hi := max(s, d), min(s+sectorSize, n)
		if lo >= hi || (hi < n && hi-lo < minZeroRun) {
			continue
		}
		if allZero(data[lo:hi]) {
			return true
		}
	}
	return false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// goodRecordAfter looks for good records after the damage at d and returns why one
// makes the damage more than a torn write, or "". It is linear in the bytes after d:
// a position is checked only if its header could hold the next records (a plausible
// length, an index in reach, a term not going back), and the checksummed bytes are
// bounded; past the bound Open refuses rather than guess.
func goodRecordAfter(data []byte, d int64, next, lastTerm uint64, pastEOF bool) string {
	n := int64(len(data))
	reach := next + uint64(n-d)/minRecordBytes
	budget := 2*(n-d) + 1<<20
	for q := d + 1; q+minRecordBytes <= n; {
		size := int64(binary.LittleEndian.Uint32(data[q:]))
		idx := binary.LittleEndian.Uint64(data[q+recordHeader:])
		term := binary.LittleEndian.Uint64(data[q+recordHeader+8:])
		if size < payloadFixed || size > MaxRecordBytes || q+recordHeader+size > n ||
			idx < next || idx > reach || term < lastTerm {
			q++
			continue
		}
		if budget -= size; budget < 0 {
			return fmt.Sprintf("too many record-like headers after offset %d to tell a torn write from damage", d)
		}
		_, m, size2, problem := decodeMarked(data[q:])
		if problem != "" {
			q++
			continue
		}
		end := q + int64(size2)
		switch {
		case pastEOF:
			return fmt.Sprintf("a good record (index %d) at offset %d follows the record at offset %d that "+
				"claims to run past the end of the file", idx, q, d)
		case !m.v2:
			return fmt.Sprintf("a good record (index %d) written by a release before batch marks follows at "+
				"offset %d: not a torn write", idx, q)
		case m.end && end < n:
			return fmt.Sprintf("a whole batch ending at index %d (offset %d) follows the damage, and more "+
				"after it: the damaged records were acknowledged", idx, q)
		}
		q = end
	}
	return ""
}
