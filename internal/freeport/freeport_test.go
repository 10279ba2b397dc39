package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPorts: distinct ports below the ephemeral range, each bindable for TCP (and UDP
// for TCPUDP) when returned.
func TestPorts(t *testing.T) {
	seen := map[int]bool{}
	for i := range 50 {
		pick := TCP
		if i%2 == 1 {
			pick = TCPUDP
		}
		p, err := pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p < low || p >= high || seen[p] {
			t.Fatalf("port %d: outside [%d, %d) or handed out twice", p, low, high)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}
