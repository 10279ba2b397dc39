// Package etcdctl is the etcdctl judge of keel's etcd door: it builds etcdctl 3.7 and
// keel, starts `keel agent -dev` and an embedded etcd 3.7 on loopback, runs the same
// scripted etcdctl session against both and compares their answers after the
// normalisation README.md lists (with every accepted difference and its reason).
// It is a module of its own so that keel's go.mod never pulls etcd's server or
// etcdctl; `make test-etcdctl` runs it. It must never reach beyond loopback.
package etcdctl
