// Package kubernetes is a judge of keel's etcd door nobody here wrote, in two parts.
// Judge 1: Kubernetes' own integration tests (k8s.io/kubernetes/test/integration/...),
// each package built with `go test -c` from the published k8s.io/kubernetes module and
// run as a subprocess whose in-process kube-apiserver stores everything in a real
// 3-node keel cluster (through a follower's etcd door). Judge 2: the kube-apiserver
// binary itself on all three nodes' doors, driven with client-go while keel's leader
// is killed and restarted. Debian's etcd 3.4 is the control of both.
//
// Which packages run, and every test skipped or changed with its reason, are in
// judge_test.go's judges table and README.md. It is a module of its own so that
// keel's go.mod never pulls Kubernetes; `make test-kubernetes` runs it.
package kubernetes
