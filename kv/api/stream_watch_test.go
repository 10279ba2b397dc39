package api

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

var watchRequests = []StreamRequest{
	{ID: 1, Op: StreamWatch, Key: []byte("a/"), Prefix: true, PrevKV: true, Revision: 7, Progress: 5 * time.Second},
	{ID: 2, Op: StreamWatch, Key: []byte("k"), Serializable: true, RequireLeader: true},
	{ID: 3, Op: StreamWatch, Prefix: true},
	{ID: 1, Op: StreamWatchCancel},
}

var watchResponses = []StreamResponse{
	{ID: 1, Op: StreamWatch, Watch: StreamWatchCreated, Revision: 9},
	{ID: 1, Op: StreamWatch, Watch: StreamWatchEvents, Revision: 10, Events: []StreamEvent{
		{Type: EventPut, KV: KV{Key: "a/1", Value: []byte("v"), CreateRevision: 3, ModRevision: 10, Version: 2, Lease: 77},
			PrevKV: &KV{Key: "a/1", Value: []byte("u"), CreateRevision: 3, ModRevision: 3, Version: 1}},
		{Type: EventDelete, KV: KV{Key: "a/2", Value: []byte{}, ModRevision: 10}},
	}},
	{ID: 5, Op: StreamWatch, Watch: StreamWatchEvents, Revision: 11, Shared: []uint64{6, 300}, Events: []StreamEvent{
		{Type: EventPut, KV: KV{Key: "a/3", Value: []byte("w"), CreateRevision: 11, ModRevision: 11, Version: 1}}}},
	{ID: 1, Op: StreamWatch, Watch: StreamWatchProgress, Revision: 12},
	{ID: 1, Op: StreamWatch, Watch: StreamWatchEnd, Revision: 12, Reason: ReasonSlowWatcher, Message: "slow"},
	{ID: 2, Op: StreamWatch, Watch: StreamWatchEnd, Revision: 2, CompactRevision: 4, Reason: ReasonResourceExpired},
	{ID: 3, Op: StreamWatch, Err: &Error{Code: 429, Reason: ReasonTooManyWatches, Message: "limit"}},
}

// TestStreamWatchRoundTrip: every watch request and answer decodes to what was
// encoded, and the shared-payload encoder writes the same bytes as the general one.
func TestStreamWatchRoundTrip(t *testing.T) {
	roundTripsEqual(t, watchRequests, nil)
	for _, want := range watchResponses {
		got, b := roundTripResponse(t, want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
		if want.Watch == StreamWatchEvents {
			payload := AppendStreamEvents(nil, want.Events)
			shared := AppendStreamWatchFrame(nil, want.ID, want.Revision, payload)
			if len(want.Shared) > 0 {
				shared = AppendStreamSharedWatchFrame(nil, append([]uint64{want.ID}, want.Shared...), want.Revision, payload)
			}
			if !bytes.Equal(shared, b) {
				t.Fatalf("shared-payload encoder %x, AppendStreamResponse %x", shared, b)
			}
		}
	}
	// A shared frame names at least one other watch, and every id it counts.
	ev := AppendStreamEvents(nil, watchResponses[1].Events)
	for name, body := range map[string][]byte{
		"no other watch":   append([]byte{5, byte(StreamWatch), byte(streamWatchShared), 11, 0}, ev...),
		"ids cut short":    {5, byte(StreamWatch), byte(streamWatchShared), 11, 3, 6},
		"count beyond max": append([]byte{5, byte(StreamWatch), byte(streamWatchShared), 11, 0x81, 0x80, 0x80, 0x01}, ev...),
	} {
		var r StreamResponse
		if err := DecodeStreamResponse(body, &r); err == nil {
			t.Errorf("%s: %x decoded as %+v", name, body, r)
		}
	}
	// Progress is whole milliseconds on the wire; more than a day is refused.
	b := AppendStreamRequest(nil, &StreamRequest{ID: 4, Op: StreamWatch, Key: []byte("k"), Progress: 25 * time.Hour})
	var r StreamRequest
	if err := DecodeStreamRequest(b[1:], &r); err == nil {
		t.Fatalf("progress of 25h decoded as %+v", r)
	}
}
