// Package wal is keel's Raft log store: an append-only log in segment files with one
// write and one fdatasync per batch of entries. It implements hashicorp/raft's LogStore.
//
// Layout of a directory:
//
//	seg-<first index, 20 digits>.wal   segments, in index order; only the last is written
//	first                              the logical first index after a head truncation
//
// A segment is a sequence of records
//
//	length:uint32 crc32c(payload):uint32 payload
//	payload = index:uint64 term:uint64 type:uint8 appendedAt:int64 data:bytes extensions:bytes
//
// (little endian; bytes = uint32 length + content), with consecutive indexes, at most
// MaxRecordBytes of payload each.
//
// # What Open keeps
//
// On Open every record is read and checked. A batch is written with one write and made
// durable with one fdatasync before StoreLogs returns, and the next batch is written
// only after that; so a crash can damage only the end of the last segment, the batch
// that was being written. Open therefore accepts damage only as a suffix of the last
// segment: when the first bad record there is followed by no good record, the bad bytes
// are what an interrupted batch left (never acknowledged) and are cut off, durably,
// before anything is appended. Complete records of that batch that precede the damage
// are kept: they were never acknowledged, but keeping a prefix of a batch is as good as
// the batch having been acknowledged and the answer lost, which Raft tolerates.
//
// Any other damage — anywhere in an earlier segment, or a bad record followed by a good
// one — is corruption and Open refuses to start, naming file, offset and cause. Damage
// confined to the last record of the last segment cannot be told from a torn write and
// is cut; Open logs how many bytes it cut and where.
//
// # What StoreLogs acknowledges
//
// StoreLogs returns only after fdatasync. A failed write leaves the store usable: the
// bytes it may have left past the log's end are cut off (truncate + fdatasync) before
// anything else is written, so they can neither come back after a restart nor sit in a
// segment that rolls over — except a failed append right after a suffix was deleted:
// hashicorp/raft then keeps the deleted entries as its last log (a TODO in its
// appendEntries), so that failure is final too and a restart makes the two agree. A
// failed fdatasync, or any failure while deleting, is final: the store refuses every later write with ErrFailed (after a failed fdatasync
// the kernel may have dropped the dirty pages, and a retry that succeeds proves
// nothing — the "fsyncgate" lesson) and calls Options.OnFail once, so the node can
// stop writing and step down. Reopening re-reads what is on disk.
//
// A truncation is durable before DeleteRange returns, and every creation, removal and
// rename of a file is followed by a directory fsync before the store relies on it.
//
// # Why keel keeps a log of its own
//
// Three well-kept stores were measured against it with the same workload: one
// StoreLogs of 256-byte entries per call, on ext4 with real fsync, 2 cores
// (BenchmarkStoreLogs in raft/pebblelog runs all of them in one go; medians of 6
// samples, 2026-11-23):
//
//		batch   raft/wal    pebble v2.1.7      raft-boltdb v2
//		    1    291 µs     307 µs (1.05×)     648 µs (2.2×)
//		   16    563 µs     871 µs (1.55×)    1515 µs (2.7×)
//		   64    589 µs     761 µs (1.29×)    2281 µs (3.9×)
//
//	  - raft-boltdb (keel's log until the WAL) writes B+tree pages and pays two
//	    fsyncs per batch; with it keel's leader was fsync-bound (27 % of its CPU under
//	    BoltStore.StoreLogs, 14 % in fdatasync) at 0.85× etcd's writes at 64 clients.
//	  - hashicorp/raft-wal v0.4.0 was as fast, but a node killed with -9 in keel's
//	    chaos suite could not restart ("sealed segment has no index block", its issue
//	    31), and its Close left the meta database locked.
//	  - cockroachdb/pebble v2 (raft/pebblelog, a complete LogStore kept for this
//	    comparison and as a fallback) passes the same kinds of crash and I/O-error
//	    tests, but is 1.05–1.55× slower per batch, adds 11.9 MB (+60 %) to the binary,
//	    and on a failed WAL fsync calls Logger.Fatalf (the store turns that into
//	    ErrFailed, as this package does).
//
// So the log stays keel's own, and earns it with the crash suite in this package
// (crash_test.go, regress_test.go): every byte offset of the last batch cut, zeroed or
// garbled; every byte of every segment flipped; a power loss at every file operation
// with every prefix of the unsynced directory operations; failed writes, fdatasyncs
// and truncations; and a model-based random test with crashes (`go test ./raft/wal
// -wal.long` runs it for longer).
package wal
