package wal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
)

// What Open makes of damage in the last segment.
//
// The torn-write model. A batch is one write and one fdatasync, and the next batch
// starts only after that fdatasync returned, so a power loss can damage only the
// batch being written, W, and only the way a disk loses an unfinished write. The
// 512-byte sector grid cuts W into pieces: from W's start to the next sector
// boundary, then whole sectors, the last ending where W ends. Each piece is either
// as written or reads as zeros (writeback goes out of order, so a lost piece may sit
// between written ones), and the file may end anywhere in W (its size not updated).
// Nothing else: no written byte changes. Anything else is damage to data that was on
// disk — a flipped bit, garbage, a lost sector in a batch that others followed — and
// Open refuses it.
//
// Zeros alone do not tell a lost piece: a value may hold kilobytes of them. A piece
// is lost, for Open, when all of it reads as zeros; where W starts is not known from
// the file (a suffix deletion can end the log mid-batch), so the first piece is taken
// to start at the first bad record, d. What tells a lost piece from zeros the record
// holds is the checksum: a bit flip leaves a record one bit from a good one, which
// CRC-32C finds (it tells every single-bit error in up to 2^31 bits from every other),
// while a torn write leaves whole pieces zeroed — one bit from a good record only if
// the lost piece held a single set bit, which reads exactly as that bit flipped (and
// is refused), or by a chance of 8·length in 2^32.
//
// judgeDamage calls the damage at d a torn write — Open cuts it off — only if all of
// these hold:
//
//  1. The record at d looks unfinished: some of its length field lies in a lost
//     piece (then what the field reads — its low bytes lost, 70,045 reads 65,536 —
//     says nothing of where the record ends); or the file ends inside it and the
//     bytes up to the end of the file are not a whole record whose length field alone
//     is wrong; or the file holds all of it and some of it lies in a lost piece. A
//     zero length field in a written piece, a length no record has, or an index field
//     that differs from the one that belongs there in a byte that is not lost, is not
//     what a torn write leaves.
//  2. No single flipped bit makes it a good record of the right index (oneBitOff):
//     not in its length field (the length its data and extensions length fields make
//     is one bit from it, and checks), not in its checksum field, and not in its
//     payload. The payload is not searched when the lost pieces run from the record
//     to the end of the file and the record carries batch marks: an acknowledged
//     batch ends in its last record's nonzero flags byte, so a flip never leaves a
//     file that ends in zeros.
//  3. When its length field can be believed, it does not end a batch with bytes after
//     it (its appendedAt mark, when readable): such a batch was followed by another
//     write, so it was acknowledged.
//  4. No good record after d ends a batch with bytes after it, and none is a record of
//     a release before the marks (each of those is a batch of its own); no good
//     record at all follows one the file ends inside.
//
// Example: batch 11..20 is being written when the power fails. The sector holding
// 14..16 was never written and reads as zeros; 17..20 were. Record 14 fails its
// checksum with a lost piece in it (1), no bit flip explains it (2), it is not a
// batch end (3), and after it only 17..19 (mid-batch) and 20 (the batch's end, at the
// end of the file) are good (4): a torn write, cut at 14; 11..13 stay, as if the
// batch were acknowledged and the answer lost. Had batch 21 followed 20 in the file,
// 20 would end a batch with bytes after it: the batch was acknowledged, and Open
// refuses. Had 11..20 been acknowledged and record 14 held a sector of zeros of its
// own, a flipped bit in 14 would fail (2), and Open refuses.
//
// What this cannot see: damage that zeroes a record's first 27 bytes and everything
// after it hides whether that record ended a batch (and, for a final record written
// by a release before the marks, whose last bytes can be zeros, whether a bit flipped
// in it); damage of two or more bits in the final batch that leaves a lost-looking
// piece; and a lost piece combined with a flipped bit in a later record of the same
// batch (that batch was torn, so it was not acknowledged: cutting it is right). These
// are cut as torn writes. Every test of these rules is in crash_test.go,
// regress_test.go, regress22_test.go and issue34_test.go.

// sectorSize is the unit a disk writes whole.
const sectorSize = 512

// judgeDamage returns "" when the damage at d in data (the last segment) is a torn
// write, or why it is not. next is the index the record at d should hold and
// lastTerm the term of the good record before it (0 for none).
func judgeDamage(data []byte, d int64, next, lastTerm uint64) string {
	n := int64(len(data))
	rec := data[d:]
	if len(rec) < 4 {
		return "" // the file ends inside a length field
	}
	t := tornView{data: data, d: d}
	size := int64(binary.LittleEndian.Uint32(rec))
	lenLost := t.lostIn(d, d+4)
	end := int64(-1) // the record's end, when its length field can be believed
	pastEOF := false
	switch {
	case lenLost:
		// Some of the length field is in a lost piece: what it reads says nothing of
		// where the record ends (its high bytes lost, 70,045 reads 4,509; its low
		// bytes, 65,536).
	case size == 0:
		return fmt.Sprintf("the record at offset %d has a zero length field in a sector that was written", d)
	case size < payloadFixed || size > MaxRecordBytes:
		return fmt.Sprintf("a record length of %d is neither a record nor zeros", size)
	default:
		end = d + recordHeader + size
		if m, ok := peekMark(rec); ok && m.end && end < n {
			return fmt.Sprintf("the record at offset %d ends a batch and %d bytes follow it: that batch "+
				"was acknowledged", d, n-end)
		}
	}
	var want [8]byte
	binary.LittleEndian.PutUint64(want[:], next)
	for i := int64(0); i < 8 && recordHeader+i < int64(len(rec)); i++ {
		if at := d + recordHeader + i; data[at] != want[i] && !t.lost(at) {
			var idx [8]byte
			copy(idx[:], rec[recordHeader:])
			return fmt.Sprintf("the record at offset %d holds index %d where %d belongs", d,
				binary.LittleEndian.Uint64(idx[:]), next)
		}
	}
	switch {
	case end > n:
		pastEOF = true
		if completeAt(rec) {
			return fmt.Sprintf("the record at offset %d is whole up to the end of the file, but its "+
				"length field is damaged", d)
		}
	case end >= 0 && !t.lostIn(d, end):
		return fmt.Sprintf("the record at offset %d fails its checksum although the file holds all "+
			"of it and none of its sectors reads as zeros: damaged after it was written", d)
	}
	if why := oneBitOff(data, d, next, lastTerm, t.wholePayloadCheck(end)); why != "" {
		return why
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

// tornView is the last segment as the torn-write model sees it from the first bad
// record at d on: pieces that a lost write would leave as zeros. The first piece runs
// from d to the next sector boundary (d can be where the batch being written began:
// after any record, since a suffix deletion can end the log mid-batch); the others
// are the sectors after it; the last ends at the end of the file.
type tornView struct {
	data []byte
	d    int64
}

// piece returns the piece that holds byte i (i >= d).
func (t tornView) piece(i int64) (lo, hi int64) {
	s := i / sectorSize * sectorSize
	return max(s, t.d), min(s+sectorSize, int64(len(t.data)))
}

// lost tells whether byte i is in a piece that reads as zeros.
func (t tornView) lost(i int64) bool {
	if i < t.d || i >= int64(len(t.data)) {
		return false
	}
	lo, hi := t.piece(i)
	return allZero(t.data[lo:hi])
}

// lostIn tells whether a byte of [from, to) is in a piece that reads as zeros.
func (t tornView) lostIn(from, to int64) bool {
	to = min(to, int64(len(t.data)))
	for i := max(from, t.d); i < to; {
		if t.lost(i) {
			return true
		}
		_, hi := t.piece(i)
		i = hi
	}
	return false
}

// wholePayloadCheck tells whether oneBitOff must look for a flipped bit anywhere in the
// record's payload, which costs a pass over it and, for a torn record, refuses one in
// 2^32/(8·length) by chance. It need not when the file ends in a lost suffix that
// reaches into the record — its last piece and every byte back to a piece boundary
// before the record's end read as zeros — and the record carries batch marks (or its
// mark is lost with the suffix): an acknowledged batch of this release ends in its
// last record's nonzero flags byte, so one flipped bit never leaves a file that ends
// in zeros, except by making a length field point into them, which oneBitOff checks
// anyway. end is the record's end (-1: unknown).
func (t tornView) wholePayloadCheck(end int64) bool {
	n := int64(len(t.data))
	z := n // where the zeros at the end of the file start
	for z > t.d && t.data[z-1] == 0 {
		z--
	}
	p := z // the first piece boundary from there
	if p > t.d && p%sectorSize != 0 {
		p = (p/sectorSize + 1) * sectorSize
	}
	if p >= n || (end >= 0 && p >= end) {
		return true
	}
	if p <= t.d+offAppendedAt+1 {
		return false // the mark is lost with the suffix (see "What this cannot see")
	}
	_, marked := peekMark(t.data[t.d:])
	return !marked
}

// oneBitOff returns why the record at d is one flipped bit away from a good record of
// index next (and a term from lastTerm on), or "". A torn write leaves whole pieces
// as zeros and everything else as written: a file one bit away from an acknowledged
// batch is what a bit flip leaves, and refused, even where zeros the record really
// holds look like a lost piece. It tries the length the record's own fields give
// (its data and extensions lengths) when that differs from the length field in one
// bit, a flip of the checksum field, and, when payload is set, the one payload bit
// that the checksums' difference points to (CRC-32C tells every single-bit error in
// a record of up to 2^31 bits from every other).
func oneBitOff(data []byte, d int64, next, lastTerm uint64, payload bool) string {
	rec := data[d:]
	size := binary.LittleEndian.Uint32(rec)
	sum := func() uint32 { return binary.LittleEndian.Uint32(rec[4:]) }
	good := func(p []byte, want uint32) bool {
		if crc32.Checksum(p, castagnoli) != want {
			return false
		}
		l, _, err := decodePayload(p)
		return err == nil && l.Index == next && l.Term >= lastTerm
	}
	fits := func(size uint32) bool {
		return size >= payloadFixed && size <= MaxRecordBytes && int64(size) <= int64(len(rec))-recordHeader
	}
	if own, ok := fieldsLength(rec); ok && own != size && bits.OnesCount32(own^size) == 1 && fits(own) &&
		good(rec[recordHeader:recordHeader+own], sum()) {
		return fmt.Sprintf("the record at offset %d is good but for one bit of its length field (%d, "+
			"its fields make %d): damaged after it was written", d, size, own)
	}
	if !fits(size) {
		return ""
	}
	p := rec[recordHeader : recordHeader+size]
	syn := crc32.Checksum(p, castagnoli) ^ sum()
	if bits.OnesCount32(syn) == 1 && good(p, crc32.Checksum(p, castagnoli)) {
		return fmt.Sprintf("the record at offset %d is good but for one bit of its checksum: damaged "+
			"after it was written", d)
	}
	if !payload {
		return ""
	}
	if j, bit, ok := crcBitError(syn, int(size)); ok {
		fixed := bytes.Clone(p)
		fixed[j] ^= 1 << bit
		if good(fixed, sum()) {
			return fmt.Sprintf("the record at offset %d is good but for bit %d of its payload byte %d "+
				"(offset %d): damaged after it was written", d, bit, j, d+recordHeader+int64(j))
		}
	}
	return ""
}

// fieldsLength is the payload length that rec's data and extensions length fields
// make, when the file holds them.
func fieldsLength(rec []byte) (uint32, bool) {
	at := recordHeader + payloadFixed - 8 // the data length field
	if len(rec) < at+4 {
		return 0, false
	}
	dl := int64(binary.LittleEndian.Uint32(rec[at:]))
	if int64(len(rec)) < int64(at)+4+dl+4 {
		return 0, false
	}
	el := int64(binary.LittleEndian.Uint32(rec[int64(at)+4+dl:]))
	n := payloadFixed + dl + el
	if n > MaxRecordBytes {
		return 0, false
	}
	return uint32(n), true
}

// crcTable and crcUndo run CRC-32C's register over zero bytes, forward and back.
var crcTable, crcUndo = func() (t [256]uint32, undo [256]byte) {
	const poly = 0x82f63b78 // Castagnoli, reversed
	for i := range t {
		c := uint32(i)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ poly
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	for i, c := range t {
		undo[c>>24] = byte(i) // the top byte of t[i] is one to one in i
	}
	return t, undo
}()

// crcBitError finds the bit of an n-byte message whose flip changes its CRC-32C by
// syn: byte j, bit b. The change a flip of bit b of byte j makes is crcTable[1<<b]
// carried through the n-1-j bytes after it; so syn is carried back, a byte at a time,
// until it is one of the eight.
func crcBitError(syn uint32, n int) (j, b int, ok bool) {
	var one [8]uint32
	for b := range one {
		one[b] = crcTable[1<<b]
	}
	x := syn
	for m := 0; m < n; m++ {
		for b, v := range one {
			if x == v {
				return n - 1 - m, b, true
			}
		}
		i := crcUndo[x>>24]
		x = (x^crcTable[i])<<8 | uint32(i)
	}
	return 0, 0, false
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
