// Package etcdsnap judges keel's etcd snapshot import and export (#36) against etcd
// 3.7 itself, in a module of its own (it embeds etcd's server and etcdutl's restore):
// a seeded random history on an embedded etcd → `etcdctl snapshot save` (clientv3's
// snapshot.SaveWithVersion) → `keel snapshot restore` into a fresh keel process → every
// key at every revision from the compact revision to the head, a watch from the compact
// revision and the leases answer the same on both; then `keel snapshot save --format
// etcd` → etcdutl's snapshot restore → an embedded etcd started from it answers the
// same again. The same import runs from Debian's etcd 3.4 (/usr/bin/etcd) when it is
// installed (skipped otherwise). Run it with `make test-etcdsnap`.
package etcdsnap
