// Package etcdv3 is keel's etcd door: the etcd v3 gRPC API (KV, Watch, Lease, Cluster,
// Maintenance, Auth: users, roles and their permissions on keel's ACL engine, and gRPC
// health) on its own listener, so that etcd clients work unchanged; and, on the same
// listener, etcd's JSON gateway (POST /v3/..., GET /version, /health) whose every call
// is a gRPC call of the door (gateway.go).
//
// DESIGN: this door translates; it owns no rule. Which room owns what:
//   - rights (ACL tokens and policies), limits (key and value sizes, list and watch
//     bounds, requests in flight), reserved prefixes, UTF-8 and duplicate-key checks:
//     the service core, package kv ([kv.Server]'s exported methods: Authenticate,
//     AdmitRequest, OpenStream, CheckClientCert, Range, CheckOp, CheckCompare,
//     CheckTxnSize, Txn, Compact, the Lease* methods, Watch, Members, StateView, the
//     User*, Role* and Auth* methods of users and roles (kv/core_users.go);
//     Config.MaxRequestBytes sizes the largest message, Config.MaxStreamInFlight the
//     calls of one connection). A call runs for the [kv.Caller] admit resolved from
//     the "token" metadata (or, as etcd, "authorization"); a long stream asks the
//     core to Refresh it.
//   - etcd's own shapes: here, and only here. Range's sort, revision filters, count
//     and limit (shapeRange), the translation of etcd's range end "\x00", watch IDs,
//     filters and progress, lease TTL rounding, the header (member and cluster IDs
//     hashed from keel's), and the mapping of every error to etcd's own (rpctypes) in
//     one function, etcdError. Errors only etcd has (ignore_value with a value) are
//     raised here; a rule the core also keeps (an empty key: kv.ErrEmptyKey) is the
//     core's, which etcdError answers with etcd's error.
//   - the state machine's rules (compaction, nested-transaction op budget, leases):
//     package fsm, behind the core.
//
// Revisions. keel has one revision space, shared by every door: an etcd client sees
// the same numbers as an HTTP client. keel's own records (under "\x00keel/": ACLs,
// storage versions, migrations) and typed resources' keys are written in that space
// but are invisible through this door (kv.Server.Hidden), so an etcd client sees
// gaps: consecutive writes it makes may be more than one revision apart. etcd itself
// promises only that revisions increase, and clients (kube-apiserver, concurrency)
// rely on no more.
//
// Keys. Every keel key is UTF-8, so no key holds the byte 0xff: etcd's range end
// "\x00" (every key from the start key on) becomes the end "\xff" (etcdKeyspaceEnd),
// which is above every key keel can hold.
package etcdv3
