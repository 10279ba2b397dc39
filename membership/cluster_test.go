package membership

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/internal/freeport"
)

// Test cluster helpers: real memberlist nodes on 127.0.0.1 with kernel-chosen ports
// and DefaultLoopbackConfig timings. Set KEEL_TEST_LOG=1 to see their logs.

const waitTimeout = 15 * time.Second

func discardLogger() hclog.Logger {
	if os.Getenv("KEEL_TEST_LOG") != "" {
		return hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	return hclog.NewNullLogger()
}

func testConfig(id string) Config {
	c := DefaultLoopbackConfig()
	c.NodeID = id
	c.BindAddr = "127.0.0.1:0"
	c.Logger = discardLogger().Named(id)
	return c
}

func testMeta(id string) Meta {
	return Meta{NodeID: id, RaftAddr: "127.0.0.1:1" + id, HTTPAddr: "127.0.0.1:2" + id,
		Release: "v1.0.0", MinCommandFormat: 1, MaxCommandFormat: 1}
}

// testNode is a started Membership plus a recorder of its events.
type testNode struct {
	*Membership
	cfg  Config
	mu   sync.Mutex
	evs  []Event
	done chan struct{}
}

// startNode opens a node and records its events until Close; it is closed at cleanup.
func startNode(t *testing.T, cfg Config, meta Meta) *testNode {
	t.Helper()
	n, err := tryStartNode(t, cfg, meta)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.NodeID, err)
	}
	return n
}

func tryStartNode(t *testing.T, cfg Config, meta Meta) (*testNode, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	m, err := Open(ctx, cfg, meta)
	if err != nil {
		return nil, err
	}
	n := &testNode{Membership: m, cfg: cfg, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for ev := range m.Events() {
			n.mu.Lock()
			n.evs = append(n.evs, ev)
			n.mu.Unlock()
		}
	}()
	t.Cleanup(func() { n.close(t) })
	return n, nil
}

func (n *testNode) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Errorf("close %s: %v", n.cfg.NodeID, err)
	}
	<-n.done
}

func (n *testNode) addr() string { return n.Local().Addr }

// events returns the recorded events about node id.
func (n *testNode) events(id string) []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Event
	for _, ev := range n.evs {
		if ev.Member.ID() == id {
			out = append(out, ev)
		}
	}
	return out
}

func (n *testNode) member(id string) (Member, bool) { return n.Member(id) }

// startCluster starts n nodes named prefix1..prefixN, all joining the first one.
func startCluster(t *testing.T, prefix string, n int, adjust func(*Config)) []*testNode {
	t.Helper()
	var nodes []*testNode
	for i := 1; i <= n; i++ {
		cfg := testConfig(fmt.Sprintf("%s%d", prefix, i))
		if adjust != nil {
			adjust(&cfg)
		}
		if i > 1 {
			cfg.Join = []string{nodes[0].addr()}
		}
		nodes = append(nodes, startNode(t, cfg, testMeta(cfg.NodeID)))
	}
	return nodes
}

// waitFor polls cond until it returns "" or waitTimeout passes; then it fails the test
// with what and cond's last complaint.
func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", waitTimeout, what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// holdsFor checks cond on every poll for d, failing at the first complaint: for
// properties that must stay true (two clusters never merging).
func holdsFor(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if msg := cond(); msg != "" {
			t.Fatalf("%s: %s", what, msg)
		}
	}
}

// seesStatus is a waitFor condition: every observer sees id with status st.
func seesStatus(observers []*testNode, id string, st Status) func() string {
	return func() string {
		for _, o := range observers {
			m, ok := o.member(id)
			if !ok || m.Status != st {
				return fmt.Sprintf("%s sees %s as %v (known %v)", o.cfg.NodeID, id, m.Status, ok)
			}
		}
		return ""
	}
}

// aliveIDs lists the NodeIDs a node sees alive.
func aliveIDs(n *testNode) []string {
	var ids []string
	for _, m := range n.Members() {
		if m.Status == StatusAlive {
			ids = append(ids, m.ID())
		}
	}
	return ids
}

// freeAddr returns a 127.0.0.1 address whose port was free for TCP and UDP a moment
// ago, picked outside the kernel's ephemeral range (see package freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.AddrTCPUDP()
}
