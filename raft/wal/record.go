package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	hraft "github.com/hashicorp/raft"
)

// The record format (see the package doc). Its layout has not changed since the WAL's
// first release, so every release with a WAL reads every other's segments; the batch
// marks (below) ride inside fields older releases pass through untouched.
const (
	recordHeader = 8 // length + crc
	payloadFixed = 8 + 8 + 1 + 8 + 4 + 4
	// offAppendedAt is where appendedAt starts in a record (header included).
	offAppendedAt = recordHeader + 8 + 8 + 1

	// MaxRecordBytes bounds one record's payload. StoreLogs refuses a larger entry
	// (ErrTooLarge) rather than acknowledge what Open would not read back; keel's own
	// request limits keep every command far below it (kv.MaxRequestBytesLimit).
	MaxRecordBytes = 256 << 20
)

// Batch marks. A StoreLogs batch is one write and one fdatasync, and the next batch is
// written only after that fdatasync returned: so a record that ends a batch and has
// bytes after it in the file was durable before those bytes were written — it was
// acknowledged. The marks say which records end a batch, twice:
//
//   - in the low 16 bits of appendedAt, near the front of the record (bytes 25–26), so
//     a record whose tail is damaged still tells: markTag<<4 | flags, flags always
//     holding markV2 and markEnd on the last record of a batch. appendedAt keeps its
//     time to 2^16 ns (65.5 µs); hashicorp/raft reads it for metrics only.
//   - in a 4-byte trailer of the extensions field, 'k' 'w' 2 flags, which tells a
//     marked record from one an older release wrote (whose low appendedAt bits are
//     random) without doubt. Older releases hand the trailer to raft as opaque
//     extensions; keel sets no extensions of its own.
//
// A record without the trailer (written by a release before the marks) counts as a
// batch of its own: the strictest reading.
const (
	markTag    = 0xA5C
	markBits   = 16
	markMask   = 1<<markBits - 1
	markV2     = 1 << 1
	markEnd    = 1 << 0
	trailerLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// minRecordBytes is the smallest record the format allows.
const minRecordBytes = recordHeader + payloadFixed

func recordSize(l *hraft.Log) int {
	return recordHeader + payloadFixed + len(l.Data) + len(l.Extensions) + trailerLen
}

// appendRecord appends l's record; end marks the last record of a batch.
func appendRecord(b []byte, l *hraft.Log, end bool) []byte {
	start := len(b)
	flags := byte(markV2)
	if end {
		flags |= markEnd
	}
	b = append(b, make([]byte, recordHeader)...)
	b = binary.LittleEndian.AppendUint64(b, l.Index)
	b = binary.LittleEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	at = at&^markMask | markTag<<4 | int64(flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Extensions)+trailerLen))
	b = append(b, l.Extensions...)
	b = append(b, 'k', 'w', 2, flags)
	payload := b[start+recordHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

// mark is what a record says of its batch.
type mark struct {
	v2  bool // the record carries batch marks
	end bool // it ends its batch (always true for a record without marks)
}

// peekMark reads the appendedAt mark of the record starting at rec, which may be
// damaged: ok is false when the bytes are missing or hold no mark.
func peekMark(rec []byte) (m mark, ok bool) {
	if len(rec) < offAppendedAt+2 {
		return mark{}, false
	}
	v := binary.LittleEndian.Uint16(rec[offAppendedAt:])
	if v>>4 != markTag || v&markV2 == 0 {
		return mark{}, false
	}
	return mark{v2: true, end: v&markEnd != 0}, true
}

// decodeRecord checks and decodes the record at the start of data; n is its size.
// The log's byte slices alias data.
func decodeRecord(data []byte) (l *hraft.Log, n int, problem string) {
	l, _, n, problem = decodeMarked(data)
	return l, n, problem
}

// decodeMarked is decodeRecord that also returns the record's batch mark.
func decodeMarked(data []byte) (l *hraft.Log, m mark, n int, problem string) {
	if len(data) < recordHeader {
		return nil, mark{}, 0, "truncated record header"
	}
	size := int(binary.LittleEndian.Uint32(data))
	sum := binary.LittleEndian.Uint32(data[4:])
	if size < payloadFixed || size > MaxRecordBytes || size > len(data)-recordHeader {
		return nil, mark{}, 0, fmt.Sprintf("record length %d", size)
	}
	payload := data[recordHeader : recordHeader+size]
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, mark{}, 0, "checksum mismatch"
	}
	l, m, err := decodePayload(payload)
	if err != nil {
		return nil, mark{}, 0, err.Error()
	}
	return l, m, recordHeader + size, ""
}

// scanRecords walks the records of data, whose first entry must be index first, and
// calls fn for each good one. It returns the offset after the last good record and,
// when it stopped early, why.
func scanRecords(data []byte, first uint64, fn func(l *hraft.Log, at int64)) (int64, string) {
	off := 0
	next := first
	for off < len(data) {
		l, n, problem := decodeRecord(data[off:])
		if problem != "" {
			return int64(off), problem
		}
		if l.Index != next {
			return int64(off), fmt.Sprintf("index %d where %d was expected", l.Index, next)
		}
		fn(l, int64(off))
		next++
		off += n
	}
	return int64(off), ""
}

// decodePayload decodes one record payload and strips its batch marks; the byte
// slices alias p.
func decodePayload(p []byte) (*hraft.Log, mark, error) {
	if len(p) < payloadFixed {
		return nil, mark{}, errors.New("short payload")
	}
	l := &hraft.Log{Index: binary.LittleEndian.Uint64(p), Term: binary.LittleEndian.Uint64(p[8:]),
		Type: hraft.LogType(p[16])}
	at := int64(binary.LittleEndian.Uint64(p[17:]))
	rest := p[25:]
	var err error
	if l.Data, rest, err = cutBytes(rest); err != nil {
		return nil, mark{}, err
	}
	if l.Extensions, rest, err = cutBytes(rest); err != nil {
		return nil, mark{}, err
	}
	if len(rest) != 0 {
		return nil, mark{}, errors.New("trailing bytes in record")
	}
	m := mark{end: true}
	if e := l.Extensions; len(e) >= trailerLen && e[len(e)-4] == 'k' && e[len(e)-3] == 'w' && e[len(e)-2] == 2 {
		flags := e[len(e)-1]
		m = mark{v2: true, end: flags&markEnd != 0}
		l.Extensions = e[: len(e)-trailerLen : len(e)-trailerLen]
		if len(l.Extensions) == 0 {
			l.Extensions = nil
		}
		at &^= markMask
	}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return l, m, nil
}

func cutBytes(p []byte) (field, rest []byte, err error) {
	if len(p) < 4 {
		return nil, nil, errors.New("short length")
	}
	n := binary.LittleEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return nil, nil, errors.New("field longer than record")
	}
	if n == 0 {
		return nil, p[4:], nil
	}
	return p[4 : 4+n : 4+n], p[4+n:], nil
}
