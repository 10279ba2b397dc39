package api

import "testing"

var txnRequests = []StreamRequest{
	{ID: 1, Op: StreamTxn, Value: []byte(`{"success":[{"type":"put","key":"a","value":"eA=="}]}`)},
	{ID: 2, Op: StreamTxn, Value: []byte{}},
}

var txnResponses = []StreamResponse{
	{ID: 1, Op: StreamTxn, Revision: 12, Body: []byte(`{"revision":12,"succeeded":true,"responses":[{"type":"put"}]}`)},
	{ID: 2, Op: StreamTxn, Err: &Error{Code: 400, Reason: ReasonBadRequest, Message: "txn: no ops"}},
}

// TestStreamTxnRoundTrip: txn requests and answers decode to what was encoded; a txn
// request with flags or a key is refused.
func TestStreamTxnRoundTrip(t *testing.T) {
	roundTripsEqual(t, txnRequests, txnResponses)
	for name, body := range map[string][]byte{
		"flags":     {1, byte(StreamTxn), StreamFlagPrev, 0, 2, '{', '}'},
		"key":       {1, byte(StreamTxn), 0, 1, 'k', 2, '{', '}'},
		"truncated": {1, byte(StreamTxn), 0, 0, 5, '{', '}'},
	} {
		var got StreamRequest
		if err := DecodeStreamRequest(body, &got); err == nil {
			t.Errorf("%s: %x decoded as %+v", name, body, got)
		}
	}
}
