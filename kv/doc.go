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
// Besides HTTP, two more doors reach the same rules: the stream protocol (stream*.go)
// and the etcd v3 gRPC API (etcd_*.go, [EtcdServer]). A door only translates: rights,
// limits, reserved prefixes and validation live once, in helpers every door calls, and
// each door maps errors to its protocol's in one function (classify, etcdError).
package kv
