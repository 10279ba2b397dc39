package api

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	d := binDecoder{b: data}
	if len(data) < len(binListMagic)+1 || string(data[:len(binListMagic)]) != binListMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrBadBinaryList)
	}
	if v := data[len(binListMagic)]; v != binListVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrBadBinaryList, v, binListVersion)
	}
	d.b = data[len(binListMagic)+1:]
	resp := &ListResponse{Revision: d.int("revision")}
	resp.Continue = string(d.bytes("continue"))
	n := d.uvarint("count")
	// Each item takes at least 5 bytes: no count larger than that can be honest.
	if d.err == nil && n > uint64(len(d.b))/5 {
		d.fail("count %d exceeds the %d bytes left", n, len(d.b))
	}
	if d.err == nil {
		resp.Items = make([]KV, 0, n)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		kv := KV{Key: string(d.bytes("key"))}
		kv.Value = d.bytes("value")
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		kv.CreateRevision, kv.ModRevision, kv.Version = d.int("create_revision"), d.int("mod_revision"), d.int("version")
		resp.Items = append(resp.Items, kv)
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return resp, nil
}

// binDecoder reads the fields of a binary list or stream frame; the first failure
// sticks in err, wrapping bad (ErrBadBinaryList when nil).
type binDecoder struct {
	b   []byte
	err error
	bad error
}

func (d *binDecoder) fail(format string, args ...any) {
	if d.err == nil {
		bad := d.bad
		if bad == nil {
			bad = ErrBadBinaryList
		}
		d.err = fmt.Errorf("%w: %s", bad, fmt.Sprintf(format, args...))
	}
}

func (d *binDecoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated before %s", what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *binDecoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || (n > 1 && d.b[n-1] == 0) { // overlong encodings are not canonical
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *binDecoder) int(what string) int64 {
	v := d.uvarint(what)
	if v > 1<<62 {
		d.fail("%s %d out of range", what, v)
	}
	return int64(v)
}

func (d *binDecoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("%s of %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}
