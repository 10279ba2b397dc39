package api

import (
	"encoding/binary"
	"time"
)

// Leases on the stream protocol: the operations of POST /v1/leases, POST
// /v1/leases/{id}/keepalive and DELETE /v1/leases/{id}, and a put that attaches a
// lease (PUT /v1/kv/{key}?lease=ID), with the same semantics and errors:
//
//	grant     = id op=6 flags=0 key:bytes (empty) lease_id:uvarint (0 = the server picks) ttl_s:uvarint
//	keepalive = id op=7 flags=0 key:bytes (empty) lease_id:uvarint
//	revoke    = id op=8 flags=0 key:bytes (empty) lease_id:uvarint
//	put       = ... [prev_revision] lease_id:uvarint   with flags&StreamFlagLease
//
// Answers, status 0:
//
//	grant:     lease_id:uvarint ttl_ms:uvarint
//	keepalive: lease_id:uvarint ttl_ms:uvarint  (the time the lease has left)
//	revoke:    revision:uvarint deleted:uvarint
//
// A server offers them in its answer to the upgrade (StreamFeatureLeases in
// HeaderStreamFeatures); a client sends them only to a server that offered them.
// Neither side of an older release knows the ops: a server answers them 400
// (unknown op), and a put with StreamFlagLease 400 (unknown flags), writing nothing.

// Lease operations.
const (
	StreamLeaseGrant     StreamOp = 6
	StreamLeaseKeepAlive StreamOp = 7
	StreamLeaseRevoke    StreamOp = 8
)

// StreamFlagLease: a put carries the lease it attaches the key to.
const StreamFlagLease = 1 << 4

// StreamFeatureLeases is the feature a server lists in its upgrade answer when it
// serves the lease operations.
const StreamFeatureLeases = "leases"

func isLeaseOp(op StreamOp) bool {
	return op == StreamLeaseGrant || op == StreamLeaseKeepAlive || op == StreamLeaseRevoke
}

// appendLeaseRequest appends the args of a lease request.
func appendLeaseRequest(b []byte, r *StreamRequest) []byte {
	b = binary.AppendUvarint(b, uint64(r.LeaseID))
	if r.Op == StreamLeaseGrant {
		b = binary.AppendUvarint(b, uint64(r.TTL/time.Second))
	}
	return b
}

// decodeLeaseRequest decodes the args of a lease request.
func decodeLeaseRequest(d binDecoder, flags byte, r *StreamRequest) {
	if flags != 0 || len(r.Key) != 0 {
		d.Fail("a lease request has no flags and no key")
		return
	}
	r.LeaseID = d.int("lease id")
	if r.Op == StreamLeaseGrant {
		ttl := d.Uvarint("ttl")
		if ttl > uint64(MaxLeaseTTL) {
			d.Fail("ttl %d s above %d s", ttl, MaxLeaseTTL)
		}
		r.TTL = time.Duration(ttl) * time.Second
	} else if r.LeaseID == 0 && d.Err() == nil {
		d.Fail("lease id 0")
	}
}

// appendLeaseResponse appends the result of a lease answer (status 0).
func appendLeaseResponse(b []byte, r *StreamResponse) []byte {
	if r.Op == StreamLeaseRevoke {
		b = binary.AppendUvarint(b, uint64(r.Revision))
		return binary.AppendUvarint(b, uint64(r.Deleted))
	}
	b = binary.AppendUvarint(b, uint64(r.LeaseID))
	return binary.AppendUvarint(b, uint64(r.TTL/time.Millisecond))
}

// decodeLeaseResponse decodes the result of a lease answer (status 0).
func decodeLeaseResponse(d binDecoder, r *StreamResponse) {
	if r.Op == StreamLeaseRevoke {
		r.Revision, r.Deleted = d.int("revision"), d.int("deleted")
		return
	}
	r.LeaseID = d.int("lease id")
	ms := d.Uvarint("ttl_ms")
	if ms > uint64(2*MaxLeaseTTL*1000) {
		d.Fail("ttl_ms %d out of range", ms)
	}
	r.TTL = time.Duration(ms) * time.Millisecond
}
