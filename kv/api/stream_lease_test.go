package api

import (
	"reflect"
	"testing"
	"time"
)

var leaseRequests = []StreamRequest{
	{ID: 1, Op: StreamLeaseGrant, Key: []byte{}, TTL: 60 * time.Second},
	{ID: 2, Op: StreamLeaseGrant, Key: []byte{}, LeaseID: MaxLeaseID, TTL: time.Second},
	{ID: 3, Op: StreamLeaseKeepAlive, Key: []byte{}, LeaseID: 77},
	{ID: 4, Op: StreamLeaseRevoke, Key: []byte{}, LeaseID: 1 << 40},
	{ID: 5, Op: StreamPut, Key: []byte("k"), Value: []byte("v"), HasLease: true, LeaseID: 77},
	{ID: 6, Op: StreamPut, Key: []byte("k"), Value: []byte("v"), HasPrev: true, PrevRevision: 4, HasLease: true, LeaseID: 9},
}

var leaseResponses = []StreamResponse{
	{ID: 1, Op: StreamLeaseGrant, LeaseID: 12345, TTL: 60 * time.Second},
	{ID: 3, Op: StreamLeaseKeepAlive, LeaseID: 77, TTL: 41500 * time.Millisecond},
	{ID: 4, Op: StreamLeaseRevoke, Revision: 99, Deleted: 3},
	{ID: 5, Op: StreamLeaseKeepAlive, Err: &Error{Code: 404, Reason: ReasonNotFound, Message: "lease 77: not found"}},
}

// TestStreamLeaseRoundTrip: every lease request and answer decodes to what was
// encoded; malformed lease requests are refused.
func TestStreamLeaseRoundTrip(t *testing.T) {
	for _, want := range leaseRequests {
		got := roundTripRequest(t, want)
		if want.Op != StreamPut {
			want.Key = nil // an empty key decodes as nil
			got.Key = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
	for _, want := range leaseResponses {
		if got, _ := roundTripResponse(t, want); !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip %+v → %+v", want, got)
		}
	}
	for name, r := range map[string]StreamRequest{
		"keepalive of lease 0":   {ID: 7, Op: StreamLeaseKeepAlive},
		"revoke of lease 0":      {ID: 7, Op: StreamLeaseRevoke},
		"lease request with key": {ID: 7, Op: StreamLeaseRevoke, Key: []byte("k"), LeaseID: 3},
		"ttl above a day":        {ID: 7, Op: StreamLeaseGrant, TTL: (MaxLeaseTTL + 1) * time.Second},
	} {
		b := AppendStreamRequest(nil, &r)
		var got StreamRequest
		if err := DecodeStreamRequest(b[1:], &got); err == nil {
			t.Errorf("%s: decoded as %+v", name, got)
		}
	}
	// A get or delete carries no lease.
	for _, body := range [][]byte{
		{1, byte(StreamGet), StreamFlagLease, 1, 'k', 0, 5},
		{1, byte(StreamDelete), StreamFlagLease, 1, 'k', 5},
	} {
		var got StreamRequest
		if err := DecodeStreamRequest(body, &got); err == nil {
			t.Errorf("%x decoded as %+v", body, got)
		}
	}
}
