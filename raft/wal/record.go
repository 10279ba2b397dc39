package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	hraft "github.com/hashicorp/raft"
)

// The record format (see the package doc). It has not changed since the WAL's first
// release, so every release with a WAL reads every other's segments.
const (
	recordHeader = 8 // length + crc
	payloadFixed = 8 + 8 + 1 + 8 + 4 + 4

	// MaxRecordBytes bounds one record's payload. StoreLogs refuses a larger entry
	// (ErrTooLarge) rather than acknowledge what Open would not read back; keel's own
	// request limits keep every command far below it (kv.MaxRequestBytesLimit).
	MaxRecordBytes = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func recordSize(l *hraft.Log) int {
	return recordHeader + payloadFixed + len(l.Data) + len(l.Extensions)
}

func appendRecord(b []byte, l *hraft.Log) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHeader)...)
	b = binary.LittleEndian.AppendUint64(b, l.Index)
	b = binary.LittleEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Extensions)))
	b = append(b, l.Extensions...)
	payload := b[start+recordHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

// decodeRecord checks and decodes the record at the start of data; n is its size.
// The log's byte slices alias data.
func decodeRecord(data []byte) (l *hraft.Log, n int, problem string) {
	if len(data) < recordHeader {
		return nil, 0, "truncated record header"
	}
	size := int(binary.LittleEndian.Uint32(data))
	sum := binary.LittleEndian.Uint32(data[4:])
	if size < payloadFixed || size > MaxRecordBytes || size > len(data)-recordHeader {
		return nil, 0, fmt.Sprintf("record length %d", size)
	}
	payload := data[recordHeader : recordHeader+size]
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, 0, "checksum mismatch"
	}
	l, err := decodePayload(payload)
	if err != nil {
		return nil, 0, err.Error()
	}
	return l, recordHeader + size, ""
}

// scanRecords walks the records of data, whose first entry must be index first, and
// calls fn for each good one. It returns the offset after the last good record and,
// when it stopped early, why.
func scanRecords(data []byte, first uint64, fn func(index uint64, at int64)) (int64, string) {
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
		fn(l.Index, int64(off))
		next++
		off += n
	}
	return int64(off), ""
}

// validRecordAfter looks for a well-formed record of index ≥ minIndex anywhere after
// offset from (exclusive). A torn write can only damage a suffix of the file, so a
// damaged record followed by a good later one is corruption, not a crash's leftovers.
// It returns the record's offset and index, or -1.
func validRecordAfter(data []byte, from int64, minIndex uint64) (int64, uint64) {
	for p := from + 1; p+recordHeader+payloadFixed <= int64(len(data)); p++ {
		size := int64(binary.LittleEndian.Uint32(data[p:]))
		if size < payloadFixed || size > MaxRecordBytes || size > int64(len(data))-p-recordHeader {
			continue
		}
		l, _, problem := decodeRecord(data[p:])
		if problem == "" && l.Index >= minIndex {
			return p, l.Index
		}
	}
	return -1, 0
}

// decodePayload decodes one record payload; the byte slices alias p.
func decodePayload(p []byte) (*hraft.Log, error) {
	if len(p) < payloadFixed {
		return nil, errors.New("short payload")
	}
	l := &hraft.Log{Index: binary.LittleEndian.Uint64(p), Term: binary.LittleEndian.Uint64(p[8:]),
		Type: hraft.LogType(p[16])}
	if at := int64(binary.LittleEndian.Uint64(p[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	rest := p[25:]
	var err error
	if l.Data, rest, err = cutBytes(rest); err != nil {
		return nil, err
	}
	if l.Extensions, rest, err = cutBytes(rest); err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, errors.New("trailing bytes in record")
	}
	return l, nil
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
