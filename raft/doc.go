// Package raft replicates keel's state machine (package fsm) with hashicorp/raft. It
// gives the rest of keel writes from any node, linearizable and serializable reads,
// joins, membership changes and leadership transfer — replication only: it does not
// pace compaction (fsm.Compactor) nor mint the cluster secret (the agent does).
//
// # Design
//
// What it owns. One Node per process: hashicorp/raft — keel's fork of v1.8.0 in
// third_party/hashicorp-raft, whose leader writes its log while it replicates it
// (PATCHES.md; "The leader's write" below) — over the log in keel's own WAL
// (raft/wal: one fdatasync per batch), the stable store (term, vote) in raft-boltdb,
// file snapshots of the fsm.Store, and one TCP port that carries both Raft's transport
// and keel's RPC (forwarded writes, read indexes, joins, membership changes), told apart
// by the first byte of a connection (mux.go). The files follow the concepts:
// node.go (Open, Close), apply.go (writes), read.go (read index), leadership.go,
// members.go, contact.go (leader contact), rpc.go, bootstrap.go, snapshot.go,
// leadercall.go (CallLeader: an opaque request served by the leader, as kv's lease
// keepalives are; ApplyLeader: a write that is never forwarded), rejoin.go (a node
// rebuilt from its peers after its log was damaged), describe.go, metrics.go (the
// Observer an exporter gets timings through, and the counters it reads: raft imports
// no metrics library).
//
// Invariants.
//   - A write is applied at most once. Apply retries only errors that prove the command
//     never reached the log (ErrNoLeader, ErrNotLeader, a connection that failed before
//     the request was sent); anything else whose outcome is unknown is ErrTimeout.
//   - A forwarded write is applied on the leader it reached, never forwarded again.
//   - A linearizable read sees every write acknowledged before it began: the leader
//     serves a read index only after its term's barrier has applied (leaderState.ready)
//     and after a heartbeat round that began after it took its commit index; the
//     reading node waits until its store has applied that index.
//   - The leader never proposes a command format some voter cannot apply
//     (SetCommandFormatLimit, ErrFormatNotAgreed).
//   - A log store that fails to sync stops the node (logStoreFailed): nothing is
//     acknowledged after a write that may not be on disk.
//   - The leader counts itself toward a commit only once its own copy is durable; it
//     sends a batch to the followers while it writes it, and a write that fails
//     after that steps it down and stops the node, its clients told "unknown"
//     (ErrTimeout): the followers may hold the entries and commit them, and no other
//     entry ever takes their indexes in that term.
//   - Open unwinds a partial start through shutdown, the path Close takes.
//   - A node never runs as a voter without Raft state it may have acknowledged: Open
//     refuses a data dir marked raft-member that holds no state, and one that lost a
//     part of it — the log, raft.db, a snapshot the log relies on (statecheck.go) —
//     (ErrStateLost) unless MoveStateAside, after the cluster removed the node, marked
//     it to rejoin; it then rejoins as a non-voter and is promoted once its log has
//     caught up (rejoin.go).
//   - A replica's state never goes back to an older Raft index: fsmAdapter.Restore
//     refuses a snapshot installed below the applied index, which hashicorp/raft
//     sends and installs (see its doc); only an operator's restore, at a fresh index,
//     brings back an older revision.
//
// Threads. hashicorp/raft's own goroutines, its FSM goroutine among them, which alone
// calls fsmAdapter.ApplyBatch and Restore. Node runs leaderLoop (follows leadership
// and runs each term's barrier), membersLoop (refreshes the member list), contactLoop
// (tracks leader contact), joinLoop (until joined), rejoinLoop (a rebuilt node, until
// it is a voter again) and the RPC server's connections;
// all end in Close, which waits for them. Apply and View are safe for concurrent use
// and block at most ApplyTimeout.
//
// The leader's write. Upstream hashicorp/raft's leader fdatasyncs a batch and only
// then sends it, so a commit costs two fdatasyncs and a round trip in sequence. keel's
// fork (third_party/hashicorp-raft, PATCHES.md) sends while it writes (the Raft
// thesis, §10.2.1): the WAL's StoreLogsAsync makes the batch readable, the
// replicators send it, the leader waits for its own fdatasync and only then counts
// itself toward the quorum; followers fdatasync before they answer, so a committed
// entry is durable on a majority, the leader among it or not. A failed fdatasync
// takes the batch back, fails the WAL, steps the leader down and stops the node (see
// Invariants). Measured (bench/README.md, 2026-11-28, three nodes each with its own
// 2 ms fdatasync): one client p50 5.48 → 2.93 ms (1.87×), 1.3× writes/s at 8 and 64
// clients; no change without an fdatasync to hide or with three nodes on one disk,
// whose fdatasyncs the device runs one at a time. The leader still waits for its own
// fdatasync in raft's main loop, which caps the many-client gain; handing that wait
// to a goroutine, as etcd does, is the next step.
//
// Followers hear of a commit at once. Upstream's leader tells followers the commit
// index only with its next entries or when a replicator's commit timer fires (5–10
// ms with keel's CommitTimeout), so a watch or a read on a follower of a quiet cluster
// saw a write ~8 ms after the writer did. The fork's leader notifies its replicators
// when the commit index advances, as etcd's does: a follower applies a write ~0.1 ms
// after the leader answered it (bench/README.md, "Followers hear of a commit at once").
//
// A worked example: a write of key "a" sent to follower n2 of a cluster led by n1.
//
//	n2.Apply(put a=1)    encodes the command; leaderContact says n1 leads
//	n2 → n1 rpcApplyLeases  the encoded command over keel's RPC port (rpcApply to
//	                     a leader of a release before rpcApplyLeases)
//	n1.applyLocal        checks the format limit, raft.Apply: n1 writes 41 to its WAL
//	                     and sends it to n2 and n3 while it fdatasyncs; n1's sync and
//	                     n2's answer (n2 synced 41) make a majority: 41 commits;
//	                     its FSM goroutine applies 41 in fsm.Store (revision 17)
//	                     and returns *fsm.Result
//	n1 → n2              the result, encoded with each key's lease
//	                     (fsm.EncodeResultWithLeases); on n1 itself the result
//	                     would have been returned as it is, with no encoding
//	n2                   decodes it: revision 17. A linearizable read on n2 now asks
//	                     n1 for a read index (≥ 41) and waits until n2 applied it.
package raft
