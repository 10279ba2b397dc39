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
// MaxRecordBytes of payload each. Since keel 0.10 every record also says whether it
// ends its StoreLogs batch, in two places older releases pass through untouched: the
// low 16 bits of appendedAt and a 4-byte trailer of extensions (record.go). Releases
// before read these records unchanged, so a node can be downgraded.
//
// # What Open keeps
//
// On Open every record is read and checked. A batch is written with one write and made
// durable with one fdatasync before StoreLogs returns, and the next batch is written
// only after that; so a power loss can damage only the batch being written, the way a
// disk loses an unfinished write: the file ends early, or whole pieces of the write —
// from its start to the next 512-byte sector boundary, then whole sectors — read as
// zeros, in any order; no written byte changes. Open cuts such damage off, durably,
// before anything is appended, and keeps the complete records of that batch that
// precede it (never acknowledged, but keeping them is as good as the batch having
// been acknowledged and the answer lost, which Raft tolerates). Open logs how many
// bytes it cut and where.
//
// Any other damage is corruption, and Open refuses to start with ErrCorrupt naming the
// file, the offset, the first index affected and why: damage in a segment that is not
// the last; a record the file holds whole that fails its checksum with no piece of it
// reading as zeros; a record one flipped bit away from a good one — in the final
// record too, and in a record whose data holds zeros of its own, which a lost sector
// is told from by the checksum (CRC-32C locates a single flipped bit; a lost sector
// leaves a record one bit from a good one only if it held a single set bit, which
// reads exactly as that bit flipped, and is refused); garbage; and damage in, or
// before, a batch that another batch followed in the file — that batch was durable
// before the next was written, so it was acknowledged. recover.go states the rules,
// with a worked example and the cases they cannot see. A node refused this way must
// be rebuilt from its peers (docs/operations.md), never cut by hand: it may have
// acknowledged the entries it lost. The rules read the format as every release with a
// WAL writes it: nothing on disk changed for them.
//
// # What StoreLogs acknowledges
//
// StoreLogs returns nil only after fdatasync. A failed write is cut back to the last
// good record (truncate + fdatasync) before StoreLogs returns its error, so a plain
// error means the entries are certainly not in the log, now or after any restart; if
// that cut fails, the store fails (below) and the outcome is unknown. A failed
// fdatasync, any failure while deleting a suffix, and a failed append right after a
// suffix was deleted (hashicorp/raft then keeps the deleted entries as its last log,
// a TODO in its appendEntries) are final: the store cuts the unsynced batch from the
// page cache, so that a restart does not read it back as good ("fsyncgate"), refuses
// every later write with ErrFailed, and calls Options.OnFail once, so the node can
// stop writing and step down. Reopening re-reads what is on disk. A failure while
// deleting a prefix is reported but not final: every step of it leaves a log a reopen
// reads correctly, and whole segments go first, so a full disk gets room back.
//
// A truncation is durable before DeleteRange returns, and every creation, removal and
// rename of a file is followed by a directory fsync before the store relies on it.
//
// # What StoreLogsAsync acknowledges
//
// The leader's path (hraft.AsyncLogStore, keel's patch of hashicorp/raft): the batch is
// written exactly as by StoreLogs and readable (GetLog, LastIndex) when
// StoreLogsAsync returns, so raft sends it to the followers during the fdatasync,
// which the returned wait does. Nothing is acknowledged before wait returns nil: raft
// counts the leader toward a commit only then. The store takes no other write until
// wait is called (writeMu stays held), so the rule above — a batch is durable before
// the next is written — and every crash case stay as they are. A failed write is the
// plain "not stored" error of StoreLogs, before anything was readable; a failed
// fdatasync in wait takes the batch back from readers, cuts it and fails the store,
// and raft steps down: the batch may be durable on followers and be committed by them,
// so its outcome is unknown, and no other entry may ever take its indexes in that term.
//
// # Why segments grow as they are written
//
// etcd reserves its segments ahead (fallocate), so its fdatasync after an append
// needs no journal commit for a new file size; on ext4 here that makes one fdatasync
// 1.3–1.9× faster. This log does not: the size of the last segment is what tells a
// lost sector at the end of acknowledged batches from a torn last write (the rules
// above, issue 22), and reserved zeros after the last record would read the same as a
// lost sector. A branch that reserved 4 MiB ahead showed no gain in keel's writes on
// one disk shared by three nodes (bench/README.md, "Reserved WAL blocks").
//
// # Why keel keeps a log of its own
//
// Three well-kept stores were measured against it with the same workload: one
// StoreLogs of 256-byte entries per call, on ext4 with real fsync, 2 cores
// (BenchmarkStoreLogs, then in raft/pebblelog, ran all of them in one go; medians of
// 6 samples, 2026-11-23; raft's BenchmarkStoreLogs still compares wal and bolt):
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
//	  - cockroachdb/pebble v2 (raft/pebblelog, a complete LogStore, in main until
//	    commit 0df7a62) passed the same kinds of crash and I/O-error tests, but was
//	    1.05–1.55× slower per batch, added 11.9 MB (+60 %) to the binary, and on a
//	    failed WAL fsync called Logger.Fatalf. Once this log passed the second review's
//	    cases too (issue 22), the unwired fallback left main.
//
// So the log stays keel's own, and earns it with the crash suite in this package
// (crash_test.go, regress_test.go, regress22_test.go, issue34_test.go): every byte
// offset of the last batch cut, zeroed from a sector or garbled; lost sectors inside a
// batch; every byte of every segment flipped; for a final batch starting at each of
// the 512 offsets of a sector, with data of zeros, random or repeating bytes up to
// 128 KiB, its lost suffixes cut and its flipped bits refused (WAL_SWEEP=full for all
// of them, and a fuzz target); a power loss at every file operation with every prefix of
// the unsynced directory operations; failed writes, fdatasyncs and truncations; and a
// model-based random test with crashes (`go test ./raft/wal -wal.long` runs it for
// longer).
package wal
