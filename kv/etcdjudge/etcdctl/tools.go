//go:build tools

// tools.go keeps etcdctl in this module's go.mod: TestMain builds it with
// `go build go.etcd.io/etcd/etcdctl/v3` (go install refuses its replace directives).
package etcdctl

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
)
