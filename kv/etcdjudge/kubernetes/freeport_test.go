package kubernetes

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// freeAddr is keel's internal/freeport.Addr, copied: importing it means requiring
// github.com/keel-kv/keel, whose go.mod raises grpc, protobuf, otel and golang.org/x
// above what k8s.io/kubernetes v1.37.2 pins, and then the judged Kubernetes would be
// built with other dependencies than its release (and all of it rebuilt at each
// bump). Ports come at random from below the kernel's ephemeral range (32768–60999),
// where neither a bind to port 0 nor an outgoing connection lands, checked free, never
// the same twice in one process.
func freeAddr() string {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if ports.taken[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		ports.taken[port] = true
		return addr
	}
	panic("no free port on 127.0.0.1 in [20000, 32000)")
}

var ports = struct {
	mu    sync.Mutex
	taken map[int]bool
}{taken: map[int]bool{}}
