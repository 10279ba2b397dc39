// Package freeport picks loopback ports for tests and the chaos harness, which must
// know a node's addresses before the node starts.
//
// Asking the kernel for port 0 and closing the listener leaves a window in which the
// port is handed out again — and every outgoing connection of every test process
// running in parallel takes an ephemeral port too. So ports are picked at random below
// the kernel's ephemeral range (32768–60999 on Linux), where neither binds to port 0 nor
// outgoing connections ever land, and checked free before they are returned.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

const (
	low  = 20000
	high = 32000 // below the ephemeral range
)

var (
	mu    sync.Mutex
	taken = map[int]bool{} // never hand out the same port twice in one process
)

// TCP returns a port on ip free for TCP a moment ago.
func TCP(ip string) (int, error) { return pick(ip, false) }

// TCPUDP returns a port on ip free for both TCP and UDP a moment ago (memberlist uses
// one port for both).
func TCPUDP(ip string) (int, error) { return pick(ip, true) }

func pick(ip string, udp bool) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		port := low + rand.IntN(high-low)
		if taken[port] {
			continue
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ok := true
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				ok = false
			} else {
				u.Close()
			}
		}
		l.Close()
		if ok {
			taken[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no free port on %s in [%d, %d)", ip, low, high)
}

// Addr is TCP on 127.0.0.1 as "127.0.0.1:port"; it panics when no port is free.
func Addr() string { return addr(false) }

// AddrTCPUDP is TCPUDP on 127.0.0.1 as "127.0.0.1:port"; it panics when no port is free.
func AddrTCPUDP() string { return addr(true) }

func addr(udp bool) string {
	p, err := pick("127.0.0.1", udp)
	if err != nil {
		panic(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}
