package api

import "encoding/binary"

// Transactions on the stream protocol: POST /v1/txn's body and answer, each in one
// frame, with the same semantics, limits and errors:
//
//	txn    = id op=9 flags=0 key:bytes (empty) body:bytes   (an api.TxnRequest, JSON)
//	answer, status 0: revision:uvarint body:bytes            (the api.TxnResponse, JSON)
//
// The body stays JSON: one decoder validates a transaction whichever way it came, and
// what the stream saves — HTTP's parsing, a connection per request in flight — is
// most of a small transaction's cost. A server offers the op in its answer to the
// upgrade (StreamFeatureTxn in HeaderStreamFeatures); a client sends it only to a
// server that offered it (an older server answers it 400, unknown op, running
// nothing).

// StreamTxn is the transaction operation.
const StreamTxn StreamOp = 9

// StreamFeatureTxn is the feature a server lists in its upgrade answer when it serves
// StreamTxn.
const StreamFeatureTxn = "txn"

// appendTxnRequest appends the args of a txn request: its JSON body (r.Value).
func appendTxnRequest(b []byte, r *StreamRequest) []byte { return appendBinBytes(b, r.Value) }

// decodeTxnRequest decodes the args of a txn request.
func decodeTxnRequest(d binDecoder, flags byte, r *StreamRequest) {
	if flags != 0 || len(r.Key) != 0 {
		d.Fail("a txn request has no flags and no key")
		return
	}
	if r.Value = d.Bytes("txn body", noMax); r.Value == nil {
		r.Value = []byte{}
	}
}

// appendTxnResponse appends the result of a txn answer (status 0).
func appendTxnResponse(b []byte, r *StreamResponse) []byte {
	b = binary.AppendUvarint(b, uint64(r.Revision))
	return appendBinBytes(b, r.Body)
}

// decodeTxnResponse decodes the result of a txn answer (status 0); Body is copied out.
func decodeTxnResponse(d binDecoder, r *StreamResponse) {
	r.Revision = d.int("revision")
	r.Body = append([]byte{}, d.Bytes("txn answer", noMax)...)
}
