// Package acl is keel's ACL engine: the rights of tokens, decided from the ACL records
// every node holds in its state machine.
//
// It owns every right decision. A door (HTTP, the stream protocol, the etcd gRPC API)
// authenticates the caller, asks an [*Authorizer] and maps the typed error it gets
// ([ErrUnauthorized], [ErrForbidden], [*PolicyError]) to its protocol: doors never
// re-check a right, and never state one of their own. What lives here:
//
//   - the stored records (under [Prefix]) and their immutable snapshot, [State], built
//     by [Load] from an fsm View;
//   - [Authorizer]: what one token may do — operator rights, key and range rights,
//     typed resources, and the raw reads of typed resources' keys ([Guard]);
//   - the no-escalation rule ([Authorizer.CheckGrant]) and policy validation;
//   - token secrets: their shape, the bearer header, their stored hash.
//
// acl never writes: the records are written through Raft by package kv (the ACL
// routes), which also keeps the node's current State (rebuilt on every change under
// Prefix) and the request context that carries a caller's Authorizer. acl imports no
// door and keeps no state of its own; every value it returns is immutable and safe to
// share between goroutines.
package acl
