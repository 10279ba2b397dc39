package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/client"
)

// testCluster is n real keel agents (fsm + raft over TCP + HTTP) on 127.0.0.1, each
// with its own data dir under t.TempDir(). Node 0 bootstraps; the others join through it.
type testCluster struct {
	t      *testing.T
	agents []*Agent
	cfgs   []Config
	// clientTLS, when set (newTLSTestCluster), is how tests reach the nodes' HTTPS.
	clientTLS *tls.Config
}

// freeAddr is a loopback address whose port (TCP and UDP) was free a moment ago,
// picked outside the kernel's ephemeral range (see package freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeport.AddrTCPUDP()
}

func testConfig(t *testing.T, dir, id string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = filepath.Join(dir, id)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Raft.BindAddr = freeAddr(t)
	level := hclog.Warn
	if l := os.Getenv("KEEL_TEST_LOG"); l != "" { // e.g. KEEL_TEST_LOG=debug
		level = hclog.LevelFromString(l)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: level, Output: testWriter{t}})
	return cfg
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	return newTestClusterWith(t, n, nil, nil)
}

// newTestClusterWith is newTestCluster with tune applied to each node's config, and
// clientTLS used to reach HTTPS nodes.
func newTestClusterWith(t *testing.T, n int, clientTLS *tls.Config, tune func(*Config)) *testCluster {
	t.Helper()
	dir := t.TempDir()
	c := &testCluster{t: t, clientTLS: clientTLS}
	for i := 0; i < n; i++ {
		cfg := testConfig(t, dir, fmt.Sprintf("n%d", i+1))
		if tune != nil {
			tune(&cfg)
		}
		if i == 0 {
			cfg.Raft.Bootstrap = true
		} else {
			cfg.Raft.Join = []string{c.cfgs[0].Raft.BindAddr}
		}
		c.cfgs = append(c.cfgs, cfg)
		c.agents = append(c.agents, nil)
		c.start(i)
		if i == 0 {
			c.waitReady(0)
		}
	}
	for i := range c.agents {
		c.waitReady(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	return c
}

// start (re)starts node i with its config; restarts reuse the data dir and the bound
// raft address, and need no bootstrap or join.
func (c *testCluster) start(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, c.cfgs[i])
	if err != nil {
		c.t.Fatalf("start node %d: %v", i, err)
	}
	c.agents[i] = a
}

func (c *testCluster) stop(i int) {
	if c.agents[i] == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.agents[i].Close(ctx); err != nil {
		c.t.Logf("close node %d: %v", i, err)
	}
	c.agents[i] = nil
}

// restart stops node i and starts it again from its data dir with no join flags.
func (c *testCluster) restart(i int) {
	c.stop(i)
	c.cfgs[i].Raft.Bootstrap = false
	c.cfgs[i].Raft.Join = nil
	c.start(i)
}

func (c *testCluster) client(i int) *client.Client {
	c.t.Helper()
	cl, err := client.New([]string{c.agents[i].HTTPAddr()}, client.Options{MaxRetries: 20, TLS: c.clientTLS})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

// waitReady polls node i's /readyz until it has a leader and the cluster secret.
func (c *testCluster) waitReady(i int) {
	c.t.Helper()
	url := "http://" + c.agents[i].HTTPAddr() + "/readyz"
	hc := http.DefaultClient
	if c.clientTLS != nil {
		url = "https://" + c.agents[i].HTTPAddr() + "/readyz"
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: c.clientTLS}}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("readyz: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d not ready after 20s: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *testCluster) leader() int {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for i, a := range c.agents {
			if a != nil && a.Node().Status().State == "Leader" {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader within 15s")
	return -1
}

// waitConverged waits until every running node has applied the same log and holds the
// same state hash.
func (c *testCluster) waitConverged() {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var hashes []uint64
		var revs []int64
		for _, a := range c.agents {
			if a == nil {
				continue
			}
			v := a.Store().View()
			hashes = append(hashes, v.Hash())
			revs = append(revs, v.Revision())
		}
		same := true
		for i := range hashes {
			if hashes[i] != hashes[0] || revs[i] != revs[0] {
				same = false
			}
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nodes did not converge: revisions %v hashes %v", revs, hashes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
