// Package etcdjudge holds the judges of keel's etcd door: end-to-end tests that build
// the keel binary, start real nodes with -etcd-addr, and drive them with etcd's own
// client (go.etcd.io/etcd/client/v3 and its concurrency package). It is a module of
// its own so that keel's go.mod never pulls etcd's client; `make test-etcd` runs it.
package etcdjudge
