// Package kv serves keel's HTTP API: single-key reads and writes with compare-and-swap
// on revision, multi-key transactions, compaction, status and health, and paged
// consistent scans (KEP-365) resumed by authenticated continue tokens.
//
// kv owns the translation between HTTP and the replicated state machine: it validates
// every request before anything is proposed (bad input changes nothing), turns writes
// into fsm commands applied through a [Store] (a raft.Node in production), reads from
// fsm Views, and maps every error to one JSON status in one place (errors.go).
//
// kv never touches the raft log or the state machine directly and keeps no state of its
// own beyond the cached cluster secret: any node can serve any request, and continue
// tokens are valid on every node and across restarts because the secret that signs them
// is replicated. The wire types live in kv/api; the Go client in kv/client.
//
// The service core. [Server]'s exported methods (core*.go) are the
// operations keel offers, door-neutral: they take the caller's identity ([Caller],
// from Authenticate) and return typed results and typed errors (errors.go's Err*,
// fsm's, raft's). DESIGN: rights, limits, reserved prefixes, UTF-8 and duplicate-key
// checks live here, once; a door decodes its protocol, calls the core, encodes the
// answer and maps errors in one function of its own. The etcd v3 gRPC door is
// package kv/etcdv3, the stream protocol's door package kv/stream (attached with
// stream.Attach: it serves the connections the HTTP routes upgrade from GET
// /v1/stream); both call only the core's exported methods.
//
// The HTTP door still lives in this package (server.go's listener and middleware,
// respond.go, routes_*.go; its errors mapped by classify in errors.go, which is also
// the stream's table: WireError). Staged for its move (issue #25): the KV, txn,
// compact, lease, watch and list routes call only the core's exported methods for
// callerOf(r), and the logic behind those methods is in core*.go (the list's pages in
// routes_list.go and listversion.go, which the typed list shares); status and health,
// the admin and ACL routes and the typed resource API (routes_apis*.go) still call
// unexported helpers.
//
// Every right decision is the ACL engine's, package kv/acl: kv authenticates a request
// (acl_routes.go), keeps the node's current acl.State, writes the ACL records
// (routes_acl.go), and asks an *acl.Authorizer; it never decides a right itself.
//
// The typed resource API (objects under /apis) is package kv/resources, a layer over
// the core: it owns the schema lookup, conversions, storage-version write filter,
// KEP-365 list versions and key-migration overlays, and reaches the store only
// through the core's resource methods (core_resources.go: the caller's resource
// right, the value and list bounds, the resource's own key ranges). The /apis routes
// (routes_apis*.go) call it through ObjectAPI (attached with resources.Attach) and
// only decode and encode.
package kv
