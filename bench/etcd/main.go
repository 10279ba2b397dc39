// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain) at the
// version this module pins, built from the module proxy so bench/compare.sh can run
// the same etcd release as the clientv3 the load generator and the etcd judges use
// (Debian's etcd-server is 3.4). It lives in its own module so etcd's server never
// enters keel's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
