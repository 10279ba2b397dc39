// Package etcdchaos is issue #26's fifth judge: linearizability under faults through
// keel's etcd door. It drives a 3-node keel (chaos.ProcCluster, every node serving the
// etcd v3 API) with etcd's own client (go.etcd.io/etcd/client/v3) while chaos's fault
// runner kills leaders and cuts the network, records every operation as a chaos.Record,
// reads the store's MVCC history back through the door, and judges the history with
// chaos's checker (porcupine against chaos.KVModel, unknown outcomes settled from the
// MVCC history, durability, floors).
//
// It is a module of its own so that etcd's client stays out of keel's go.mod; it
// imports the chaos package of this tree (replace ../..). The runs are behind the
// chaos build tag (make chaos-etcd); the checker's self-test on histories built from
// etcd answers is a plain test.
package etcdchaos
