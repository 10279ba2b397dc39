// Package pebblelog is a hashicorp/raft LogStore on cockroachdb/pebble v2 (the
// engine CockroachDB keeps its Raft log in), built to decide with numbers whether
// keel keeps its own segment WAL (raft/wal) or uses a maintained engine. It is not
// wired into keel; raft/logstore.go still opens raft/wal.
//
// # Layout
//
// One pebble database per log. An entry is the key 'e' + big-endian index (so keys
// sort by index and the log is one contiguous key range) and the value
//
//	version:uint8 index:uvarint term:uvarint type:uint8 appendedAt:varint(UnixNano, 0 = zero time)
//	len(data):uvarint data len(extensions):uvarint extensions
//
// The index is repeated in the value so that a read checks key and entry agree. The
// decoder trusts nothing: every varint and length is checked against what is left,
// and a trailing byte is an error (TestCodec, FuzzDecode). Integrity of the bytes
// themselves is pebble's (checksummed WAL records and sstable blocks).
//
// # Writes
//
// StoreLogs is one pebble.Batch committed with pebble.Sync: it returns once the
// batch is in pebble's WAL and fdatasync'd. It follows raft/wal's contract: entries
// continue the log, an empty log starts anywhere, and entries starting past last+1
// (a restored user snapshot) replace the log — the range deletion of the old log
// and the new entries are the same atomic batch. DeleteRange is one
// batch.DeleteRange, synced: a prefix after a snapshot, a suffix for a follower's
// conflicting entries; a range inside the log is refused, as in raft/wal.
// FirstIndex and LastIndex are read with an iterator at Open and then kept in
// memory, moved only after a commit succeeds. Pebble makes a batch readable before
// its fsync returns; appends stay invisible because the bounds move after the sync,
// and truncations hold the bounds' lock across their fsync, as raft/wal's do.
//
// # Options
//
// WAL on and every commit synced by its caller (WALMinSyncInterval 0: no group-commit
// delay); an 8 MiB memtable (WithMemTableSize) and an 8 MiB block cache; no
// compression; one compaction at a time (two cores shared with the state machine);
// FormatNewest. No bloom filters: entries are read by index from a narrow key range.
//
// # A failed write or fsync
//
// What pebble v2.1.7 does, read in its source and pinned by
// TestPebbleFatalfOnFailedSync: the WAL writer (record.LogWriter) keeps the first
// write or sync error and fails every later sync with it; DB.Apply then does not
// return the error but calls Options.Logger.Fatalf("pebble: fatal commit error: …").
// Pebble's default logger exits the process (os.Exit(1)); a logger whose Fatalf
// returns makes Commit return nil as if the batch were durable, and the batch is
// already readable from the memtable. So pebble neither retries nor returns: it
// stops the process. (It has no panic of its own on a stall either: its disk-health
// checker reports operations slower than 5 s through EventListener.DiskSlow, a no-op
// by default; CockroachDB is what turns a long stall into a fatal error.) A failed
// MANIFEST sync (memtable flush, compaction) also ends in Fatalf.
//
// keel's rule is that a failed fsync is never retried as if the data were safe. The
// store installs a Logger whose Fatalf panics with a private value; the goroutine
// that committed recovers it and returns an error wrapping ErrFailed, and from then
// on every call — reads too, because the memtable may hold the failed batch — returns
// that error. Only a reopen, which replays what is on disk, clears it. Fatalf from
// pebble's background goroutines (a flush or compaction whose MANIFEST sync fails)
// panics there and ends the process, as pebble's default logger would.
//
// # Tests
//
//   - contract: store, get, bounds, contiguity, replace, head and tail deletes,
//     reopen, concurrent reads under truncation, and a run on disk through flushes.
//   - TestCrash: random Raft-shaped StoreLogs/DeleteRange sequences on
//     vfs.NewCrashableMem (pebble v2's successor of v1's NewStrictMem and
//     ResetToSyncedState): crashes by CrashClone keep everything synced plus a random
//     share (0–100 %) of what was not, between calls and while a call runs; after
//     each reopen the log equals the model of acknowledged writes byte for byte (or
//     the model plus the interrupted call, never a part of it), with terms that never
//     go backwards. 6 seeds × 1000 steps, ~1075 crashes (~90 of them lose the call
//     they interrupt), pass. With pebble.NoSync instead of pebble.Sync it fails at
//     once (acknowledged writes lost).
//   - TestIOErrors (errorfs): write and sync errors on the WAL and on every file,
//     under StoreLogs and DeleteRange: the call returns ErrFailed, later calls are
//     refused even once the disk works again; after a power loss a reopen shows
//     exactly the acknowledged log; without one, the acknowledged log or it plus the
//     failed call (written but not known synced), which a Raft log may hold.
//
// # Measured (BenchmarkStoreLogs*, 256-byte commands, ext4, real fsync)
//
// Two runs of -benchtime 2s -count 3 on the 2-core shared development machine (six
// samples per cell; the disk is shared and single samples vary up to 2.5×). Median
// ns per StoreLogs call, ratio to raft/wal's time, and entries/s:
//
//	batch   raft/wal          pebblelog               raft-boltdb v2
//	    1   291 µs   3.4k/s   307 µs  1.05×  3.3k/s   648 µs  2.2×   1.5k/s
//	   16   563 µs  29.3k/s   871 µs  1.55× 18.4k/s  1515 µs  2.7×  10.8k/s
//	   64   589 µs 108.6k/s   761 µs  1.29× 84.7k/s  2281 µs  3.9×  28.2k/s
//
// Each is one fdatasync per call (bolt pays two and page writes), so at one entry
// the fsync dominates and raft/wal and pebble are level; as batches grow, pebble's
// memtable inserts and block-framed WAL add 30–55 %. raft/wal has the better write
// figures; pebble passes the same crash and error suites. Importing this package
// into cmd/keel adds 11.9 MB to the binary (19.98 → 31.89 MB; 13.9 → 21.2 MB
// stripped).
package pebblelog
