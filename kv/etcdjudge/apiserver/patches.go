package apiserver

// This file is the one list of what the judge changes in the upstream tests beyond the
// testserver swap, each with its reason. Every patch is applied by exact text: when
// upstream changes the text, the judge fails until the list is looked at again.

// patch replaces Old, found exactly once in File (relative to the module root), by New.
type patch struct {
	File, Old, New string
	Reason         string
}

// skip is a test (go test -skip pattern, anchored by the caller's names) not run.
type skip struct {
	Test   string
	Reason string
}

var patches = []patch{
	{
		File: "pkg/storage/etcd3/watcher_test.go",
		Old:  "NewTooLargeResourceVersionError(uint64(102), 1, 0)",
		New:  "NewTooLargeResourceVersionError(uint64(102), 2, 0)",
		Reason: "A fresh keel is at revision 2 where a fresh etcd is at 1: keel's own start records " +
			"(the genesis record, and the node's etcd client URL for MemberList) are written in the one " +
			"revision space every door shares and hidden from etcd clients (docs/etcd.md, kv/etcdv3 " +
			"\"Revisions\"). The etcd door opens only once both are applied, so the value is fixed. " +
			"kine makes the same patch (its compact-revision key).",
	},
	{
		File: "pkg/storage/etcd3/compact_test.go",
		Old:  "waitTimeout = 100 * waitDelay",
		New:  "waitTimeout = 1000 * waitDelay",
		Reason: "The compactor tests give one compaction cycle (a Txn that writes compact_rev_key) 100 ms " +
			"to end. Upstream's testserver runs etcd in the test's process with UnsafeNoFsync; keel runs as " +
			"its own process and fdatasyncs every write, so the window holds a gRPC round trip and a disk " +
			"sync. A stall of the CI machine's disk failed TestCompact once (stop 44, \"No waiters\", the " +
			"Txn still open); keel with a 120 ms sync (-test-log-faults slow=120ms) fails it the same way " +
			"and passes with 1 s. Only the time allowed changes, not what is checked.",
	},
}

var skips = []skip{}
