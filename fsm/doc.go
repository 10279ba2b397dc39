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
// Threads. Apply, ApplyBatch, ApplyCommand, Restore, RestoreAt and CompactStep are
// serialized by the store's mutex (raft's FSM goroutine and the Compactor call them);
// View is one atomic load and never waits. A View stays valid and consistent however
// long it is held. The Compactor owns one goroutine, from StartCompactor to Close.
//
// # Counts in O(log n)
//
// "How many live keys in [a, b) at revision r" is answered without visiting the range
// (count.go; View.Count, RangeWith's count, a transaction's get). etcd walks the rest
// of the range for it, and kube-apiserver asks for it on every page: paging a 500k-key
// prefix cost O(n) a page. The keyspace tree is internal/ostree, google/btree's tree
// forked to keep, per node, a bitmask of which items are live at the latest revision,
// each item's stamp (the revision of the key's newest version) beside it, the count of
// live keys in its subtree and a bound on its subtree's newest stamp.
//
//   - At the latest revision: count = rank(b) − rank(a), each rank a popcount and the
//     counts of the children left of the search path, on each of the tree's 3-4 levels:
//     under 1 µs at 1M keys, where the walk took 110-190 ms (bench/README.md).
//   - At an older revision r: the keys whose liveness changed after r all have their
//     newest version after r, and the stamp bounds lead to exactly those of [a, b),
//     skipping every subtree written to at or before r; each one found corrects the
//     count by [live at r] − [live now]. The correction costs O(k · (degree + log n))
//     for the k keys of the range written after r — about 1 µs each at 1M keys, the
//     stamps being kept beside the items and children they bound — and never more
//     than a walk of the range. It is small where counts are asked for: a scan's first
//     page reads the latest revision (k = 0), and its later pages read that revision
//     while the range takes writes, so k is the keys of the rest of the range written
//     since the first page. A 500k-key list in 1000 pages of 500 over 10 s, under
//     1000 writes/s to the prefix, has k ≤ 10k on its last pages (≤ 10 ms; fewer, as
//     the rest shrinks), where the walk cost 100 ms on the first page and 50 ms on
//     the average one.
//
// Why this shape. A separate order-statistic tree of the live keys would have to be
// kept in step on every write (a second copy-on-write path per put) and still could
// not count at an older revision; a log of changes per revision would be scanned
// whole, in and out of [a, b), and need a compaction of its own. The aggregates ride
// on the path a write copies anyway, so views keep their counts for free.
//
// Invariants. The aggregates are functions of the items: entryMeasure reads only an
// entry's newest version, and entries are replaced, never modified, so a view's tree
// (shared nodes) keeps its counts however long it is held; Restore rebuilds them by
// inserting. Answers depend on the items alone, so Apply stays deterministic; the
// stamp bounds may differ between replicas whose compactors reclaimed different
// amounts — a removed key's stamp may linger in a bound — which changes cost, never an
// answer, and not even cost: a key leaves the tree only when all its versions are
// below the compact revision, so the lingering stamp is below any readable revision.
// Costs: 8 bytes a key for the stamps (the masks and counts are per node), and the
// write path's aggregate updates; bench/README.md "Counts in O(log n)" has both.
//
// # etcd's KV API
//
// Every etcd v3 KV request maps onto one command or one view read, answered as etcd 3.7
// answers it (each rule below cites the etcd function it follows; tests name them too).
// Key ranges translate one way everywhere: etcd range_end "" → End nil (the key alone),
// "\x00" → End []byte{} (every key >= Key), anything else → End as is.
//
//	Range        View.RangeWith(key, end, limit, RangeOptions{..., WithCount: true});
//	             header revision = RangeResult.Revision. A negative limit is no limit.
//	Put          CmdTxn{Success: [OpPut{Lease, IgnoreValue, IgnoreLease}]}; prev_kv from
//	             OpResponse.PrevKV (always filled; drop it unless asked).
//	DeleteRange  OpDelete (range_end "") or OpDeleteRange, with PrevKV for prev_kv;
//	             OpResponse.Deleted, PrevKVs.
//	Txn          CmdTxn: Compare{Key, End, Target, Result, Value|Int} (target LEASE is
//	             TargetLease), RequestOp → Op, RequestTxn → OpTxn (OpResponse.Txn).
//	             RequestRange → OpGet with Range (set WithCount: etcd always counts).
//	Compact      CmdCompact.
//
// Rules the state machine enforces, as etcd does (server/etcdserver/txn/txn.go):
//   - every compare on the chosen path, nested ones included, reads the state before
//     the transaction (compareToPath); ops run in order, each seeing earlier writes;
//   - before the first write, every op on the path is checked in order (checkTxn): a
//     read revision outside the window (ErrFutureRevision, ErrCompacted; -1 reads the
//     latest until the first compaction), a put's lease (ErrLeaseNotFound), a key that
//     ignore_value/ignore_lease needs (ErrKeyNotFound); the first failure fails it all;
//   - one revision for the whole transaction, none if nothing was written;
//   - nested transactions share MaxTxnOps (v3rpc checkTxnRequest), hence MaxTxnDepth;
//   - a range compare holds if it holds for every key; no key compares as an absent
//     key, except VALUE, which fails (applyCompare);
//   - Range: limit+1 keys fetched unless sorting or filtering, count ignoring limit and
//     filters, filters, sort.Sort with etcd's Less (ties come out as in etcd), cut and
//     More, keys_only without values and (unless sorting by value) leases (range.go).
//
// What the etcd door does itself, before proposing: etcd's request validation errors
// (empty key, value or lease given with ignore_*, bad sort enum: fsm refuses these as
// ErrInvalidCommand, with other words); the duplicate-key check, with
// CheckDuplicateKeysEtcd (etcd's checkIntervals, quirks included: the apply path does
// not check, see CheckDuplicateKeys). An op range whose end is at or before its start
// is empty in etcd but refused by validateOp (older releases refuse it too, and must
// keep agreeing): the door sends a placeholder (OpGet of the key, CountOnly) and
// answers an empty range or deletes nothing itself. Header revisions inside a Txn's
// responses: with begin = the revision before the transaction (Result.Revision, less
// one if any op wrote) and changed = "some
// earlier op wrote" (an OpPut, or Deleted > 0), walking ops depth first in order, a
// range reports begin+1 if changed else begin, a put begin+1, a delete_range the same
// as a range after its own deletes count, a nested TxnResponse 0.
//
// A worked example of one key's history, through put, delete and compaction, is drawn
// on compact.go's comment; TestCompactionWorkedExample replays it.
package fsm
