package raft

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
)

// newTLSCluster is newCluster with mutual TLS: every node has a node certificate for
// its ID from one CA.
func newTLSCluster(t *testing.T, size int) (*testCluster, *tlstest.CA) {
	ca := tlstest.NewCA(t)
	c := newCluster(t, size, func(cfg *Config) { cfg.TLS = tlstest.Reloader(t, ca.Node(t, cfg.NodeID)) })
	return c, ca
}

func TestTLSClusterReplicatesAndForwards(t *testing.T) {
	c, _ := newTLSCluster(t, 3)
	ctx := context.Background()
	for i := range 9 { // writes on every node: followers forward over TLS RPC
		rev := mustPut(t, c.nodes[i%3], fmt.Sprintf("k%d", i), "v")
		v, err := c.nodes[(i+1)%3].View(ctx, fsm.Linearizable)
		if err != nil || v.Revision() < rev {
			t.Fatalf("#%d: linearizable read on a follower: %v (rev %d < %d?)", i, err, v.Revision(), rev)
		}
	}
}

// rawRPC opens a connection to n's raft port with cfg (nil: plain text) and sends one
// RPC frame; it returns the answer's error text, or the transport error.
func rawRPC(addr string, cfg *tls.Config, kind byte, body string) (string, error) {
	var conn net.Conn
	var err error
	if cfg != nil {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	} else {
		conn, err = net.DialTimeout("tcp", addr, 2*time.Second)
	}
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	w, r := bufio.NewWriter(conn), bufio.NewReader(conn)
	w.WriteByte(protoRPC)
	if err := writeFrame(w, []byte{kind}, []byte(body)); err != nil {
		return "", err
	}
	resp, err := readFrame(r)
	if err != nil {
		return "", err
	}
	if resp[0] == 0 {
		return "", nil
	}
	return decodeErr(resp[1:]).Error(), nil
}

// TestTLSRefusesStrangers: on a mutual-TLS raft port, a plain-text peer, a peer with a
// certificate of another CA, and a client certificate of the right CA all fail before
// any request is read; a node certificate of the right CA may not add another node.
// The configuration is unchanged and the cluster keeps working.
func TestTLSRefusesStrangers(t *testing.T) {
	c, ca := newTLSCluster(t, 3)
	lead := c.nodes[c.leader()]
	addr := lead.Addr()
	joinBody := "fake\x00127.0.0.1:1"

	if _, err := rawRPC(addr, nil, rpcAddVoter, joinBody); err == nil {
		t.Error("plain-text peer: request answered, want the connection closed")
	}
	foreign := tlstest.NewCA(t)
	fr := tlstest.Reloader(t, foreign.Node(t, "fake"))
	if _, err := rawRPC(addr, fr.PeerClientConfig(""), rpcAddVoter, joinBody); err == nil {
		t.Error("foreign-CA node certificate: request answered, want the handshake refused")
	}
	cr := tlstest.Reloader(t, ca.Client(t, "ops"))
	ccfg := cr.ClientConfig()
	ccfg.InsecureSkipVerify = true // the server's host name is not the point here
	if _, err := rawRPC(addr, ccfg, rpcAddVoter, joinBody); err == nil {
		t.Error("client certificate of the cluster CA: request answered, want it refused on the raft port")
	}
	// A node of the right CA joins only as itself.
	nr := tlstest.Reloader(t, ca.Node(t, "n9"))
	msg, err := rawRPC(addr, nr.PeerClientConfig(""), rpcAddVoter, joinBody)
	if err != nil || !strings.Contains(msg, `node "n9" may not add node "fake"`) {
		t.Errorf("n9 adding fake: answer %q, %v; want refused", msg, err)
	}
	// A foreign-CA node configured to join never becomes a member.
	cfg := testConfig(t, "intruder")
	cfg.TLS = tlstest.Reloader(t, foreign.Node(t, "intruder"))
	cfg.Join = []string{addr}
	intruder, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.shutdown()
	time.Sleep(1500 * time.Millisecond)
	for _, n := range c.nodes {
		if got := len(n.Status().Members); got != 3 {
			t.Errorf("%s sees %d members, want 3: %+v", n.cfg.NodeID, got, n.Status().Members)
		}
	}
	mustPut(t, c.nodes[0], "after", "ok")
}

// TestTLSDialChecksNodeID: dialing the address the configuration lists for node X
// and finding a certificate of node Y is refused.
func TestTLSDialChecksNodeID(t *testing.T) {
	ca := tlstest.NewCA(t)
	srv := tlstest.Reloader(t, ca.Node(t, "n2"))
	cli := tlstest.Reloader(t, ca.Node(t, "n1"))
	for _, tc := range []struct {
		want string
		ok   bool
	}{{"n2", true}, {"", true}, {"n3", false}} {
		a, b := net.Pipe()
		errc := make(chan error, 1)
		go func() {
			_, err := serverHandshake(a, srv)
			errc <- err
		}()
		b.SetDeadline(time.Now().Add(5 * time.Second))
		_, err := clientHandshake(b, cli, tc.want, 5*time.Second)
		a.Close()
		<-errc
		if (err == nil) != tc.ok {
			t.Errorf("dial expecting %q: err = %v, want ok=%v", tc.want, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), `names node "n2"`) {
			t.Errorf("dial expecting %q: error %q does not name the node found", tc.want, err)
		}
	}
}

// A TLS handshake that fails (the peer closed the connection: a node going down, a
// partition) is a failed dial: retriable, as a refused connection is, never a final
// error (one surfaced as a 500 on a read forwarded during a chaos run).
func TestTLSHandshakeFailureIsRetriable(t *testing.T) {
	ca := tlstest.NewCA(t)
	m := &mux{tls: tlstest.Reloader(t, ca.Node(t, "n1"))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close() // mid-handshake
		}
	}()
	_, err = m.dial(ln.Addr().String(), protoRPC, 2*time.Second)
	if err == nil {
		t.Fatal("dial through a closed handshake succeeded")
	}
	if !retriable(err) {
		t.Fatalf("handshake failure %v is not retriable", err)
	}
	t.Logf("handshake failure: %v", err)
}
