// Package stream is keel's stream-protocol door (api/stream.go, api/stream_watch.go):
// single-key reads and writes, transactions, leases and watches as binary frames on
// one connection upgraded from GET /v1/stream, many requests in flight, answers
// coalesced into few writes, the events of many watches in shared frames.
//
// DESIGN: this door translates; it owns no rule. Which room owns what:
//   - rights (ACL tokens and policies), limits (key and value sizes, the requests in
//     flight of the node and of one client, the watches of a token), reserved
//     prefixes, UTF-8 and duplicate-key checks: the service core, package kv
//     ([kv.Server]'s exported methods: Get, Put, Delete, DecodeTxn and Txn, the
//     Lease* methods, CheckWatch, WaitLinearizable and OpenWatch, AdmitRequest). Every
//     request runs for the [kv.Caller] of the upgrade request, with the rights its
//     token holds at the time (Refresh).
//   - the upgrade route, its access rule and the token: the HTTP door (kv/httpapi);
//     it hands the connection over through [httpapi.StreamDoor] (Attach).
//   - errors: keel's one error table, shared with HTTP, in its wire form
//     ([kv.WireError]; a watch's end, [kv.WatchEnd]).
//   - the protocol's own: here, and only here. Framing, the 413 of an oversized frame,
//     the frame timeout, the requests in flight of one connection
//     (MaxStreamInFlight) and its watches (MaxStreamWatches), batching linearizable
//     watch starts behind one wait, the pump that serves every watch of a connection,
//     and the door's metrics (keel_stream_requests_total,
//     keel_stream_request_duration_seconds).
package stream
