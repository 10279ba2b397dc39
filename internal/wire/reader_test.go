package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

var errBad = errors.New("bad input")

// read takes b apart with one fixed program (every kind of read once), the way a
// decoder does, and returns what it read and the sticky error.
func read(r *Reader) ([]any, error) {
	out := []any{r.Uint8("u8"), r.Uvarint("uv"), r.Varint("v"), r.Bytes("str", 1<<20),
		r.Uint32("u32"), r.Uint64("u64"), r.Raw("raw", 2)}
	return out, r.Err()
}

func encoded() []byte {
	b := []byte{7}
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = binary.BigEndian.AppendUint32(b, 0xdeadbeef)
	b = binary.BigEndian.AppendUint64(b, 1<<40)
	return append(b, 'x', 'y')
}

func TestReaderRoundTrip(t *testing.T) {
	r := NewReader(encoded(), errBad)
	got, err := read(r)
	if err != nil || r.Finish() != nil {
		t.Fatalf("read: %v, finish: %v", err, r.Finish())
	}
	want := []any{byte(7), uint64(300), int64(-5), []byte("abc"), uint32(0xdeadbeef), uint64(1 << 40), []byte("xy")}
	for i := range want {
		if g, w := got[i], want[i]; !equal(g, w) {
			t.Errorf("#%d: read %v, want %v", i, g, w)
		}
	}
}

func equal(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		return bytes.Equal(ab, b.([]byte))
	}
	return a == b
}

// TestReaderErrors: each problem sticks, wraps the sentinel and says what was read.
func TestReaderErrors(t *testing.T) {
	cases := []struct {
		in   []byte
		read func(*Reader)
		msg  string
	}{
		{nil, func(r *Reader) { r.Uint8("op") }, "truncated op"},
		{[]byte{0x80}, func(r *Reader) { r.Uvarint("id") }, "truncated id"},
		{[]byte{0x80, 0x00}, func(r *Reader) { r.Canonical().Uvarint("id") }, "not in shortest form"},
		{[]byte{5, 'a'}, func(r *Reader) { r.Bytes("key", 10) }, "key of 5 bytes, 1 left"},
		{[]byte{5, 'a'}, func(r *Reader) { r.Bytes("key", 4) }, "key of 5 bytes exceeds 4"},
		{[]byte{9, 1, 2}, func(r *Reader) { r.Count("count", 1) }, "count 9 exceeds the 2 bytes left"},
		{[]byte{1, 2}, func(r *Reader) { r.Uint8("a") }, "1 trailing bytes"},
		{[]byte{1, 2, 3}, func(r *Reader) { r.Uint32("sum") }, "truncated sum"},
	}
	for i, c := range cases {
		r := NewReader(c.in, errBad)
		c.read(r)
		err := r.Finish()
		if !errors.Is(err, errBad) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("#%d: err = %v, want %v containing %q", i, err, errBad, c.msg)
		}
		if r.Uint8("after") != 0 || r.Uvarint("after") != 0 || r.Bytes("after", 1) != nil || r.Err() != err {
			t.Errorf("#%d: reads after an error return values or change the error", i)
		}
	}
}

// FuzzReader: a Reader never panics, and reading a slice or the same bytes as a stream
// gives the same values, the same verdict, and a checksum of exactly the bytes read.
func FuzzReader(f *testing.F) {
	f.Add(encoded())
	f.Add([]byte{})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 2, 3, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		sl := NewReader(b, errBad)
		got, err := read(sl)
		sum := crc32.NewIEEE()
		st := NewStreamReader(bufio.NewReader(bytes.NewReader(b)), errBad, sum)
		got2, err2 := read(st)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("slice err %v, stream err %v", err, err2)
		}
		if err != nil {
			if !errors.Is(err, errBad) || !errors.Is(err2, errBad) {
				t.Fatalf("errors %v, %v do not wrap the sentinel", err, err2)
			}
			return
		}
		for i := range got {
			if !equal(got[i], got2[i]) {
				t.Fatalf("#%d: slice read %v, stream read %v", i, got[i], got2[i])
			}
		}
		if n := len(b) - sl.Len(); sum.Sum32() != crc32.ChecksumIEEE(b[:n]) {
			t.Fatalf("stream checksum does not cover exactly the %d bytes read", n)
		}
	})
}
