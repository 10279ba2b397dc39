// Package kv is keel's service core: the operations keel offers — single-key reads
// and writes with compare-and-swap on revision, multi-key transactions, paged
// consistent scans (KEP-365) resumed by authenticated continue tokens, watches,
// compaction, leases, ACL management, status and readiness — as methods of [Server]
// (core*.go) that take the caller's identity ([Caller], from Authenticate) and return
// typed results and typed errors (errors.go's Err*, fsm's, raft's).
//
// kv validates every request before anything is proposed (bad input changes nothing),
// turns writes into fsm commands applied through a [Store] (a raft.Node in
// production), and reads from fsm Views. It never touches the raft log or the state
// machine directly and keeps no per-client state: any node can serve any request, and
// continue tokens are valid on every node and across restarts because the secret that
// signs them is replicated. The wire types live in kv/api; the Go client in kv/client.
//
// DESIGN — which room owns which rule. The core states each rule once, for every
// door:
//   - rights: access.go asks the ACL engine (package kv/acl, which decides every
//     right) for each key read or written, each range, each transaction op
//     (checkTxnAccess); CheckRight for the operator rights of compaction, members,
//     snapshots, peers and ACL management (core_acl.go); leaseRight for leases;
//     ResourceRight for typed objects; CheckClientCert for the client-certificate
//     requirement. A follower forwards a write with its caller's identity and the
//     leader checks it again (forwarded.go).
//   - limits: limits.go (key and value sizes, UTF-8, range ends; checkTxn holds a
//     finished transaction, nested ones included, to them before it is proposed),
//     connlimits.go (connections and requests in flight, per node and per client,
//     shared by every door), watchlimits.go, leaselimits.go.
//   - reserved prefixes (reserved.go), duplicate keys (apply.go), lease IDs
//     (checkLeaseID), watch progress bounds (ParseWatchProgress).
//   - errors: classify (errors.go) is the one table from an error to its status and
//     reason; WireError is its wire form and WatchEnd the end of a watch. A door maps
//     the class to its own protocol (HTTP status, stream error, gRPC code) and adds
//     no row of its own.
//
// The doors, each in a package of its own, only translate: kv/httpapi (HTTP/JSON: its
// listener, middleware, routes and the route table that says which routes need a
// token), kv/stream (the binary stream protocol, upgraded from GET /v1/stream) and
// kv/etcdv3 (the etcd v3 gRPC API). They call only the core's exported methods.
//
// Beside the core: the lessor (kv/lease) keeps lease deadlines while the node leads;
// the typed resource layer (kv/resources: schema lookup, conversions,
// storage-version write filter, KEP-365 list versions, key-migration overlays)
// reaches the store only through the core's resource methods (core_resources.go) and
// serves the /apis routes through [ObjectAPI]; the continue-token codec is
// kv/internal/ctoken.
package kv
