package api

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestBinaryListRoundTrip(t *testing.T) {
	items := []BinaryListItem{
		{Key: []byte("a"), Value: []byte("1"), CreateRevision: 1, ModRevision: 2, Version: 2},
		{Key: []byte("b/ü"), Value: nil, CreateRevision: 3, ModRevision: 3, Version: 1},
		{Key: []byte("c"), Value: bytes.Repeat([]byte{0, 0xff}, 300), CreateRevision: 1 << 40, ModRevision: 1 << 41, Version: 7},
	}
	b := AppendBinaryListHeader(nil, 42, "AQtoken", len(items))
	for _, it := range items {
		b = AppendBinaryListItem(b, it)
	}
	got, err := DecodeBinaryList(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &ListResponse{Revision: 42, Continue: "AQtoken"}
	for _, it := range items {
		v := it.Value
		if v == nil {
			v = []byte{}
		}
		want.Items = append(want.Items, KV{Key: string(it.Key), Value: v, CreateRevision: it.CreateRevision,
			ModRevision: it.ModRevision, Version: it.Version})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Every truncation and a trailing byte are errors.
	for i := range b {
		if _, err := DecodeBinaryList(b[:i]); !errors.Is(err, ErrBadBinaryList) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	if _, err := DecodeBinaryList(append(b, 0)); !errors.Is(err, ErrBadBinaryList) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// FuzzDecodeBinaryList: any bytes decode or fail with ErrBadBinaryList, never panic;
// what decodes re-encodes to the same bytes.
func FuzzDecodeBinaryList(f *testing.F) {
	b := AppendBinaryListHeader(nil, 7, "tok", 2)
	b = AppendBinaryListItem(b, BinaryListItem{Key: []byte("k1"), Value: []byte("v1"), CreateRevision: 1, ModRevision: 7, Version: 3})
	b = AppendBinaryListItem(b, BinaryListItem{Key: []byte("k2"), CreateRevision: 2, ModRevision: 2, Version: 1})
	f.Add(b)
	f.Add(AppendBinaryListHeader(nil, 0, "", 0))
	f.Add([]byte("KLST\x01\x00\x00\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := DecodeBinaryList(data)
		if err != nil {
			if !errors.Is(err, ErrBadBinaryList) {
				t.Fatalf("error %v is not ErrBadBinaryList", err)
			}
			return
		}
		again := AppendBinaryListHeader(nil, resp.Revision, resp.Continue, len(resp.Items))
		for _, kv := range resp.Items {
			again = AppendBinaryListItem(again, BinaryListItem{Key: []byte(kv.Key), Value: kv.Value,
				CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version})
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded %x, re-encodes as %x", data, again)
		}
	})
}
