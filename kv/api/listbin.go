package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/keel-kv/keel/internal/wire"
)

// ContentTypeBinaryList is the media type of the binary list encoding. A list request
// (GET /v1/kv/{prefix}?list=true) whose Accept header names it is answered in it
// instead of JSON: the same ListResponse, without JSON's escaping and base64, so a page
// of large values costs a copy rather than an encode and a decode. Errors stay JSON.
const ContentTypeBinaryList = "application/vnd.keel.list.v1"

// Binary list layout, version 1:
//
//	"KLST" 0x01 revision:uvarint continue:bytes count:uvarint
//	{ key:bytes value:bytes create_revision:uvarint mod_revision:uvarint version:uvarint }×count
//
// where bytes is uvarint(len) followed by len bytes. Nothing may follow the last item.
const (
	binListMagic   = "KLST"
	binListVersion = 1
)

// ErrBadBinaryList: bytes that are not a binary list of a version this build reads.
var ErrBadBinaryList = errors.New("api: malformed binary list")

// BinaryListItem is one item to encode; it mirrors KV without forcing the key into a
// string.
type BinaryListItem struct {
	Key, Value                           []byte
	CreateRevision, ModRevision, Version int64
}

// AppendBinaryListHeader starts a binary list of count items at revision with the
// continue token cont; append each item with AppendBinaryListItem.
func AppendBinaryListHeader(b []byte, revision int64, cont string, count int) []byte {
	b = append(b, binListMagic...)
	b = append(b, binListVersion)
	b = binary.AppendUvarint(b, uint64(revision))
	b = appendBinBytes(b, []byte(cont))
	return binary.AppendUvarint(b, uint64(count))
}

// AppendBinaryListItem appends one item.
func AppendBinaryListItem(b []byte, it BinaryListItem) []byte {
	b = appendBinBytes(b, it.Key)
	b = appendBinBytes(b, it.Value)
	b = binary.AppendUvarint(b, uint64(it.CreateRevision))
	b = binary.AppendUvarint(b, uint64(it.ModRevision))
	return binary.AppendUvarint(b, uint64(it.Version))
}

func appendBinBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// DecodeBinaryList decodes a binary list. Values alias data (keys are copied into
// strings); it never trusts a length or count beyond the bytes present.
func DecodeBinaryList(data []byte) (*ListResponse, error) {

	if len(data) < len(binListMagic)+1 || string(data[:len(binListMagic)]) != binListMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrBadBinaryList)
	}
	if v := data[len(binListMagic)]; v != binListVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrBadBinaryList, v, binListVersion)
	}
	d := newBinDecoder(data[len(binListMagic)+1:], ErrBadBinaryList)
	resp := &ListResponse{Revision: d.int("revision")}
	resp.Continue = string(d.Bytes("continue", noMax))
	// Each item takes at least 5 bytes: no count larger than that can be honest.
	n := d.Count("count", 5)
	if d.Err() == nil {
		resp.Items = make([]KV, 0, n)
	}
	for i := 0; i < n && d.Err() == nil; i++ {
		kv := KV{Key: string(d.Bytes("key", noMax))}
		kv.Value = d.Bytes("value", noMax)
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		kv.CreateRevision, kv.ModRevision, kv.Version = d.int("create_revision"), d.int("mod_revision"), d.int("version")
		resp.Items = append(resp.Items, kv)
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return resp, nil
}

// binDecoder reads the fields of a binary list or stream frame: a wire.Reader that
// takes canonical uvarints only; the first failure sticks, wrapping ErrBadBinaryList or
// ErrBadStreamFrame.
type binDecoder struct{ *wire.Reader }

func newBinDecoder(b []byte, bad error) binDecoder {
	return binDecoder{wire.NewReader(b, bad).Canonical()}
}

// noMax: byte strings are bounded by the bytes present only.
const noMax = math.MaxUint64

// int reads a uvarint that must fit an int64 with room to spare (≤ 2^62).
func (d binDecoder) int(what string) int64 {
	v := d.Uvarint(what)
	if v > 1<<62 {
		d.Fail("%s %d out of range", what, v)
	}
	return int64(v)
}
