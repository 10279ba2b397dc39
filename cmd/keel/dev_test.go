package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/client"
)

func TestDevAddrs(t *testing.T) {
	nodes, err := devAddrs("127.0.0.1:7370", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]string{
		{"127.0.0.1:7370", "127.0.0.1:7371", "127.0.0.1:7372"},
		{"127.0.0.1:7380", "127.0.0.1:7381", "127.0.0.1:7382"},
		{"127.0.0.1:7390", "127.0.0.1:7391", "127.0.0.1:7392"},
	}
	for i, n := range nodes {
		if got := [3]string{n.http, n.raft, n.gossip}; got != want[i] || n.id != fmt.Sprintf("n%d", i+1) {
			t.Errorf("#%d: %s %v, want n%d %v", i, n.id, got, i+1, want[i])
		}
	}
	if _, err := devAddrs("127.0.0.1:65530", 3); err == nil {
		t.Error("ports above 65535 accepted")
	}
}

// devBasePort finds a port p below 32768 such that p+10i+{0,1,2} are free for n nodes.
func devBasePort(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		p, err := freeport.TCPUDP("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		ok := p+devPortStep*(n-1)+2 < 32768
		for i := 0; ok && i < n; i++ {
			for d := 0; ok && d < 3; d++ {
				addr := fmt.Sprintf("127.0.0.1:%d", p+devPortStep*i+d)
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					ok = false
					break
				}
				ln.Close()
				pc, err := net.ListenPacket("udp", addr)
				if err != nil {
					ok = false
					break
				}
				pc.Close()
			}
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free block of ports")
	return 0
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevThreeNodes: `keel dev -nodes 3` starts three nodes that form one cluster,
// prints their ports, and on Ctrl-C (ctx cancelled) stops all and removes the data.
func TestDevThreeNodes(t *testing.T) {
	base := devBasePort(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, devOptions{nodes: 3, httpAddr: fmt.Sprintf("127.0.0.1:%d", base),
			logLevel: "warn", logOutput: &logs, startUntil: time.Minute}, &out)
	}()
	var addrs []string
	for i := 0; i < 3; i++ {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", base+devPortStep*i))
	}
	c, err := client.New(addrs, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("dev stopped early: %v\n%s", err, out.String())
		default:
		}
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		ms, err := c.Members(qctx)
		qcancel()
		voters, leaders := 0, 0
		for _, m := range ms {
			if m.Suffrage == "Voter" {
				voters++
			}
			if m.Leader {
				leaders++
			}
		}
		if err == nil && len(ms) == 3 && voters == 3 && leaders == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members: %+v, %v\n%s", ms, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	printed := out.String()
	for i, a := range addrs {
		if !strings.Contains(printed, a) || !strings.Contains(printed, fmt.Sprintf("127.0.0.1:%d", base+devPortStep*i+1)) {
			t.Errorf("output does not show node %d's ports:\n%s", i+1, printed)
		}
	}
	var dataDir string
	for _, l := range strings.Split(printed, "\n") {
		if i := strings.Index(l, "data in "); i >= 0 {
			dataDir = strings.TrimSpace(l[i+len("data in "):])
		}
	}
	if _, err := os.Stat(dataDir); err != nil {
		t.Fatalf("data dir %q: %v", dataDir, err)
	}

	logged := len(logs.String())
	cancel() // Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev: %v", err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("dev did not stop after Ctrl-C")
	}
	// A clean stop is quiet (kills: logging on at shutdown, as before: ERROR lines of
	// the transports of nodes closing together).
	if after := logs.String()[logged:]; strings.Contains(after, "[ERROR]") {
		t.Errorf("Ctrl-C logged errors:\n%s", after)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir %s left behind: %v", dataDir, err)
	}
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Ctrl-C", a)
		}
	}
}
