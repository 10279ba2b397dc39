package api

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// roundTripRequest encodes r as a frame, reads it back and decodes it.
func roundTripRequest(t *testing.T, r StreamRequest) StreamRequest {
	t.Helper()
	body, err := ReadStreamFrame(bufio.NewReader(bytes.NewReader(AppendStreamRequest(nil, &r))), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got StreamRequest
	if err := DecodeStreamRequest(body, &got); err != nil {
		t.Fatalf("decode %+v: %v", r, err)
	}
	return got
}

// roundTripResponse encodes r as a frame, reads it back and decodes it; it also
// returns the frame.
func roundTripResponse(t *testing.T, r StreamResponse) (StreamResponse, []byte) {
	t.Helper()
	b := AppendStreamResponse(nil, &r)
	body, err := ReadStreamFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got StreamResponse
	if err := DecodeStreamResponse(body, &got); err != nil {
		t.Fatalf("decode %+v: %v", r, err)
	}
	return got, b
}

// roundTripsEqual checks that every request and answer decodes to what was encoded.
func roundTripsEqual(t *testing.T, reqs []StreamRequest, resps []StreamResponse) {
	t.Helper()
	for _, want := range reqs {
		if got := roundTripRequest(t, want); !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
	for _, want := range resps {
		if got, _ := roundTripResponse(t, want); !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
}

func TestStreamRoundTrip(t *testing.T) {
	reqs := []StreamRequest{
		{ID: 1, Op: StreamGet, Key: []byte("k")},
		{ID: 300, Op: StreamGet, Key: []byte("a/b"), Revision: 77, Serializable: true},
		{ID: 2, Op: StreamPut, Key: []byte("k"), Value: []byte{}},
		{ID: 3, Op: StreamPut, Key: []byte("k"), Value: []byte("v"), HasPrev: true, PrevRevision: 0},
		{ID: 4, Op: StreamDelete, Key: []byte("k"), HasPrev: true, PrevRevision: 1 << 40},
	}
	var stream []byte
	for i := range reqs {
		stream = AppendStreamRequest(stream, &reqs[i])
	}
	br := bufio.NewReader(bytes.NewReader(stream))
	for _, want := range reqs {
		body, err := ReadStreamFrame(br, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var got StreamRequest
		if err := DecodeStreamRequest(body, &got); err != nil {
			t.Fatalf("decode %+v: %v", want, err)
		}
		if got.ID != want.ID || got.Op != want.Op || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
			got.Revision != want.Revision || got.Serializable != want.Serializable || got.HasPrev != want.HasPrev ||
			got.PrevRevision != want.PrevRevision {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
	resps := []StreamResponse{
		{ID: 1, Op: StreamGet, Revision: 9, KV: KV{Value: []byte("v"), CreateRevision: 2, ModRevision: 8, Version: 3}},
		{ID: 2, Op: StreamPut, Revision: 10},
		{ID: 3, Op: StreamDelete, Revision: 11, Deleted: 1},
		{ID: 4, Op: StreamPut, Err: &Error{Code: 409, Reason: ReasonConflict, Message: "nope"}},
	}
	for _, want := range resps {
		got, b := roundTripResponse(t, want)
		if !bytes.Equal(AppendStreamResponse(nil, &got), b) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
	var tooLarge *ErrStreamFrameTooLarge
	b := AppendStreamRequest(nil, &StreamRequest{ID: 5, Op: StreamPut, Key: []byte("k"), Value: make([]byte, 100)})
	if _, err := ReadStreamFrame(bufio.NewReader(bytes.NewReader(b)), 50); !errors.As(err, &tooLarge) {
		t.Fatalf("over-limit frame: %v", err)
	}
}

// FuzzDecodeStreamRequest: any bytes either decode to a request that re-encodes to
// exactly the same frame, or fail with ErrBadStreamFrame; nothing panics.
func FuzzDecodeStreamRequest(f *testing.F) {
	for _, r := range []StreamRequest{
		{ID: 1, Op: StreamGet, Key: []byte("k"), Revision: 5, Serializable: true},
		{ID: 2, Op: StreamPut, Key: []byte("k"), Value: []byte("v"), HasPrev: true, PrevRevision: 3},
		{ID: 3, Op: StreamDelete, Key: []byte("k")},
	} {
		b := AppendStreamRequest(nil, &r)
		f.Add(b[1:]) // the body, without its length
	}
	for _, r := range append(append(watchRequests, leaseRequests...), txnRequests...) {
		b := AppendStreamRequest(nil, &r)
		f.Add(b[1:])
	}
	f.Add([]byte{0x80})
	f.Add([]byte{1, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, body []byte) {
		var r StreamRequest
		if err := DecodeStreamRequest(body, &r); err != nil {
			if !errors.Is(err, ErrBadStreamFrame) {
				t.Fatalf("error %v is not ErrBadStreamFrame", err)
			}
			return
		}
		again := AppendStreamRequest(nil, &r)
		body2, err := ReadStreamFrame(bufio.NewReader(bytes.NewReader(again)), len(again))
		if err != nil || !bytes.Equal(body2, body) {
			t.Fatalf("decoded %x as %+v, re-encodes as %x (%v)", body, r, body2, err)
		}
	})
}

// FuzzDecodeStreamResponse: the client's decoder never panics and never accepts what
// it cannot re-encode.
func FuzzDecodeStreamResponse(f *testing.F) {
	for _, r := range []StreamResponse{
		{ID: 1, Op: StreamGet, Revision: 9, KV: KV{Value: []byte("v"), CreateRevision: 2, ModRevision: 8, Version: 3}},
		{ID: 3, Op: StreamDelete, Revision: 11, Deleted: 1},
		{ID: 4, Op: StreamPut, Err: &Error{Code: 409, Reason: ReasonConflict, Message: "nope"}},
	} {
		b := AppendStreamResponse(nil, &r)
		f.Add(b[1:])
	}
	for _, r := range append(append(watchResponses, leaseResponses...), txnResponses...) {
		b := AppendStreamResponse(nil, &r)
		f.Add(b[1:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r StreamResponse
		if err := DecodeStreamResponse(body, &r); err != nil {
			if !errors.Is(err, ErrBadStreamFrame) {
				t.Fatalf("error %v is not ErrBadStreamFrame", err)
			}
			return
		}
		again := AppendStreamResponse(nil, &r)
		body2, err := ReadStreamFrame(bufio.NewReader(bytes.NewReader(again)), len(again))
		if err != nil || !bytes.Equal(body2, body) {
			t.Fatalf("decoded %x as %+v, re-encodes as %x (%v)", body, r, body2, err)
		}
	})
}
