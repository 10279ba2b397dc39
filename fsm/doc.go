// Package fsm is keel's replicated state machine: an MVCC keyspace with one global
// revision, on a copy-on-write B-tree (google/btree). It is pure and deterministic:
// given the same log entries every replica reaches the same state. It does no I/O
// besides snapshot streams and imports no keel package but internal/wire (byte
// decoding); replication is package raft's job.
//
// # Design
//
// What it owns. The Store (store.go): key histories, the revision, the compact
// revision, the applied Raft index and the cluster ID and secret; the command and
// result encodings that travel through the log (codec.go); snapshots (snapshot.go);
// transactions (txn.go); compaction and the Compactor that reclaims history in paced
// steps (compact.go); immutable read views (view.go); leases and the keys attached to
// them (lease.go, lease_codec.go: the state machine never reads a clock — expiry is a
// revoke command decided by the leader in kv).
//
// Invariants.
//   - The revision grows by one per transaction that writes; a key's versions are
//     newest first, and a version is never modified once linked in: views share them.
//   - No read below the compact revision is served (ErrCompacted); a read above the
//     revision is ErrFutureRevision.
//   - Apply never panics on bad bytes: an entry that does not decode yields a Result
//     carrying the error, and only the applied index moves. A CAS miss is a Result too,
//     never a replication failure.
//   - The cluster secret is set once; later CmdClusterMeta are no-ops.
//   - Encodings and the snapshot format are written down next to their code and change
//     only by adding a format version that older readers refuse (ErrUnknownFormat).
//
// Threads. Apply, ApplyBatch, ApplyCommand, Restore and CompactStep are serialized by
// the store's mutex (raft's FSM goroutine and the Compactor call them); View is one
// atomic load and never waits. A View stays valid and consistent however long it is
// held. The Compactor owns one goroutine, from StartCompactor to Close.
//
// A worked example of one key's history, through put, delete and compaction, is drawn
// on compact.go's comment; TestCompactionWorkedExample replays it.
package fsm
