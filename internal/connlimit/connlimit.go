// Package connlimit counts the connections a listener accepted, in total and by
// source IP address, so that a flood of connections (idle ones will do) cannot
// exhaust a node's file descriptors, and one source cannot take every slot.
package connlimit

import (
	"net"
	"sync"
)

// Counter counts connections in total and by source address. The zero value is not
// usable: make one with New.
type Counter struct {
	mu        sync.Mutex
	max       int
	perSource int
	total     int
	n         map[string]int
}

// New makes a counter of at most max connections, perSource of them from one source.
func New(max, perSource int) *Counter {
	return &Counter{max: max, perSource: perSource, n: map[string]int{}}
}

// Take counts one more connection of src unless a bound is reached.
func (c *Counter) Take(src string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total >= c.max || c.n[src] >= c.perSource {
		return false
	}
	c.total++
	c.n[src]++
	return true
}

// Give gives back a slot Take counted.
func (c *Counter) Give(src string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.n[src]--; c.n[src] <= 0 {
		delete(c.n, src)
	}
}

// Open reports the connections counted now.
func (c *Counter) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Source is the IP address of conn's peer (the whole address if it has no port).
func Source(conn net.Conn) string {
	a := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

// Admit counts conn against c and returns it wrapped so that closing it gives the
// slot back (once); beyond a bound it closes conn and returns false.
func (c *Counter) Admit(conn net.Conn) (net.Conn, bool) {
	src := Source(conn)
	if !c.Take(src) {
		conn.Close()
		return nil, false
	}
	return &countedConn{Conn: conn, release: sync.OnceFunc(func() { c.Give(src) })}, true
}

// countedConn gives its slot back when closed.
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
