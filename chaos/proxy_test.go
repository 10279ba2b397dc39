package chaos

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// selfNetwork is a network whose only known source is this test process ("self").
func selfNetwork(t *testing.T) (*Network, string) {
	t.Helper()
	n := NewNetwork(func(remote, local net.Addr) string {
		if _, _, ok := socketOwner(remote.(*net.TCPAddr), local.(*net.TCPAddr), []int{os.Getpid()}); ok {
			return "self"
		}
		return ""
	})
	t.Cleanup(n.Close)
	addr, err := n.Listen("dst", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	return n, addr
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return line, err
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestProxyForwardsAndDelays(t *testing.T) {
	n, addr := selfNetwork(t)
	c, r := dial(t, addr)
	if got, err := roundTrip(c, r, "hello", 2*time.Second); err != nil || got != "hello\n" {
		t.Fatalf("round trip = %q, %v; want hello", got, err)
	}
	n.SetLink("self", "dst", LinkFault{Delay: 100 * time.Millisecond})
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", 2*time.Second); err != nil || got != "slow\n" {
		t.Fatalf("delayed round trip = %q, %v", got, err)
	}
	if el := time.Since(start); el < 190*time.Millisecond {
		t.Errorf("delayed round trip took %s, want >= 200ms (100ms each way)", el)
	}
	if u := n.Unidentified(); len(u) != 0 {
		t.Errorf("unidentified connections = %q, want none (the proxy must find this process)", u)
	}
}

func TestProxyBlackholeAndHeal(t *testing.T) {
	n, addr := selfNetwork(t)
	c, r := dial(t, addr)
	if _, err := roundTrip(c, r, "before", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	n.SetLink("dst", "self", LinkFault{Blackhole: true}) // the other direction: no effect here
	if _, err := roundTrip(c, r, "other-way", 2*time.Second); err != nil {
		t.Fatalf("blackhole dst->self broke self->dst: %v", err)
	}
	n.SetLink("self", "dst", LinkFault{Blackhole: true})
	_, err := roundTrip(c, r, "lost", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("round trip through a blackhole: err = %v, want a timeout", err)
	}
	c2, r2 := dial(t, addr)
	if _, err := roundTrip(c2, r2, "new", 300*time.Millisecond); err == nil {
		t.Fatal("a new connection got through the blackhole")
	}
	n.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection that lost bytes still delivers after heal, want it reset")
	}
	c3, r3 := dial(t, addr)
	if got, err := roundTrip(c3, r3, "after", 2*time.Second); err != nil || got != "after\n" {
		t.Fatalf("after heal: %q, %v", got, err)
	}
}

func TestProxyDropResets(t *testing.T) {
	n, addr := selfNetwork(t)
	n.SetLink("self", "dst", LinkFault{DropRate: 1})
	c, r := dial(t, addr)
	if _, err := roundTrip(c, r, "x", 2*time.Second); err == nil {
		t.Fatal("message crossed a link with drop rate 1")
	}
}

func TestProxyUnknownSourceIsNotFaulted(t *testing.T) {
	n := NewNetwork(func(remote, local net.Addr) string { return "" })
	t.Cleanup(n.Close)
	addr, err := n.Listen("dst", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	n.SetLink("self", "dst", LinkFault{Blackhole: true})
	c, r := dial(t, addr)
	if _, err := roundTrip(c, r, "x", 2*time.Second); err != nil {
		t.Fatalf("unknown source: %v", err)
	}
	if u := n.Unidentified(); len(u) != 1 {
		t.Errorf("unidentified = %q, want 1", u)
	}
}

// TestSocketOwnerClosedDuringScan: a dialer that closes its socket after the proxy found
// the socket but before it scanned the processes' files is gone, not "owned by none of
// them" (which the scenarios count as an unidentified source; seen with the bytes
// attacks: "unidentified raft connection 127.0.0.1:41058 -> 127.101.0.13:27181 ...
// socket still there false").
func TestSocketOwnerClosedDuringScan(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := tcpPair(t, ln)
	defer s.Close() // the accepted end stays open, as the proxy's does while it identifies
	afterSocketLookup = func() { c.Close() }
	defer func() { afterSocketLookup = nil }()
	pid, found, ok := socketOwner(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr), []int{os.Getpid()})
	if found || ok {
		t.Errorf("socketOwner = pid %d, found %v, ok %v; want found false (the dialer closed its socket)", pid, found, ok)
	}
}

// TestSocketOwnerClosedAfterAScan: a socket that outlives one scan unowned and is then
// closed (a dialer between close(2) and the socket's release) is gone, not
// unidentified; one that outlives every scan is found and not owned.
func TestSocketOwnerClosedAfterAScan(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := tcpPair(t, ln)
	defer s.Close()
	scans := 0
	afterSocketLookup = func() {
		if scans++; scans == 2 {
			c.Close()
		}
	}
	defer func() { afterSocketLookup = nil }()
	if pid, found, ok := socketOwner(s.RemoteAddr().(*net.TCPAddr), s.LocalAddr().(*net.TCPAddr), nil); found || ok {
		t.Errorf("closed before the second scan: pid %d, found %v, ok %v; want found false", pid, found, ok)
	}
	afterSocketLookup = nil
	c2, s2 := tcpPair(t, ln)
	defer c2.Close()
	defer s2.Close()
	if pid, found, ok := socketOwner(s2.RemoteAddr().(*net.TCPAddr), s2.LocalAddr().(*net.TCPAddr), nil); !found || ok {
		t.Errorf("live and owned by none of no pids: pid %d, found %v, ok %v; want found true, ok false", pid, found, ok)
	}
}

// tcpPair dials ln and accepts the connection: the dialer's end and the accepted end.
func tcpPair(t *testing.T, ln net.Listener) (dialer, accepted net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}
