// Package etcdsnap reads and writes etcd's snapshot files, so that keel can take in an
// etcd keyspace with its history (an import) and hand its own back to etcd (an export).
// It owns etcd's on-disk format and nothing else: what a keel cluster can hold is the
// caller's rule (Limits), and the state goes in and out of package fsm only through
// fsm.SnapshotWriter and fsm.View.Histories, so a restore checks an import as it checks
// any snapshot. It never writes a file it was asked to read, and never panics on a
// damaged one.
//
// # etcd's file
//
// A snapshot is a bbolt database (`etcdctl snapshot save`, or a stopped member's
// member/snap/db). `etcdctl snapshot save` appends the sha256 of the database (32
// bytes) to it; the database is a whole number of pages (of 4096 bytes), so a file
// whose size is 32 more than a multiple of 512 carries the sum (etcdutl hasChecksum).
// The buckets keel reads and writes (etcd server/storage/schema):
//
//	"key"    key = main:8 bytes big-endian, '_', sub:8 bytes big-endian [, 't' for a delete]
//	         value = mvccpb.KeyValue (for a delete only Key is set)
//	"meta"   "finishedCompactRev", "scheduledCompactRev" = revision key as above (17 bytes)
//	         "consistent_index" = 8 bytes big-endian; "term" = 8 bytes big-endian
//	"lease"  key = ID:8 bytes big-endian, value = leasepb.Lease {1: ID, 2: TTL s, 3: RemainingTTL s}
//
// The "key" bucket holds every revision since etcd's last compaction: for each key the
// newest version at or before the compact revision (unless it is a delete before the
// compact revision: etcd's keyIndex.compact keeps a delete at it) and every later one. etcd's current revision is the newest main revision of the bucket, or the
// compact revision when that is newer; a scheduled compaction newer than the finished
// one is redone by etcd when it starts, so the compact revision is the newer of the two.
// Writes of one transaction share the main revision and count sub revisions in the
// order they ran; keel keeps the main revision only, so a key written twice in one
// transaction (etcd's apply path lets a delete and a put of the same key through) keeps
// the last write, and an export numbers the sub revisions of one revision in key order,
// the order in which keel's watches deliver them.
//
// The lease bucket is decoded with protowire, three varint fields, not with etcd's
// leasepb: leasepb lives in go.etcd.io/etcd/server/v3, whose go.mod requires 68 modules,
// and keel's module takes none of etcd's server packages (DESIGN.md: judges that need
// them live in modules of their own). The judge module (kv/etcdjudge/etcdsnap) checks
// the decoding against etcd's own leasepb.
//
// Other buckets (members, auth, alarm, cluster) are not imported: keel's members, ACL
// and alarms are its own. An export writes them empty, as etcdutl snapshot restore
// rewrites membership anyway.
package etcdsnap
