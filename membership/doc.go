// Package membership owns gossip liveness and node metadata: which keel nodes are
// alive, dead or left, and what each announces about itself (NodeID, Raft and
// HTTP addresses, release, the Raft command formats it can apply, bootstrap
// expectation, and per-resource storage versions). It runs hashicorp/memberlist
// (SWIM over UDP and TCP) with optional AES-GCM encryption and a cluster label that
// keeps distinct clusters from ever merging.
//
// It never touches Raft and imports no other keel package: it reports members
// (Members, Events) and offers pure decisions (BootstrapReady,
// ServersMeetMinimumCommandFormat, CommonCommandFormat); cmd/keel/agent turns them
// into Raft configuration changes, version GC and bootstrap.
//
// Node metadata is at most MetaMaxSize (512) bytes in a versioned, forward-compatible
// binary format (see MetaFormatVersion); DecodeMeta never panics on hostile input.
package membership
