package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv"
)

// startCLICluster starts n real nodes on loopback (the first bootstraps, the others
// join it), waits until each is ready, and stops them at the end of the test. A nil
// entry of the result is a node the test stopped with stopNode.
func startCLICluster(t *testing.T, n int) []*agent.Agent {
	t.Helper()
	dir := t.TempDir()
	var agents []*agent.Agent
	var first string
	for i := range n {
		cfg := agent.DefaultConfig()
		cfg.NodeID = fmt.Sprintf("n%d", i+1)
		cfg.DataDir = filepath.Join(dir, cfg.NodeID)
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Raft.BindAddr = freeport.AddrTCPUDP()
		cfg.KV.ACLDefault = kv.ACLAllow
		cfg.Logger = hclog.NewNullLogger()
		if i == 0 {
			cfg.Raft.Bootstrap, first = true, cfg.Raft.BindAddr
		} else {
			cfg.Raft.Join = []string{first}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		a, err := agent.Start(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("start %s: %v", cfg.NodeID, err)
		}
		agents = append(agents, a)
		t.Cleanup(func() { stopNode(agents, i) })
		waitReady(t, a.HTTPAddr())
	}
	t.Setenv("KEEL_TOKEN", "")
	t.Setenv("KEEL_ADDR", "")
	return agents
}

// stopNode stops agents[i] (a leader hands over first) once.
func stopNode(agents []*agent.Agent, i int) {
	if agents[i] == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	agents[i].Close(ctx)
	agents[i] = nil
}

// waitReady polls a node's /readyz until it answers 200 (a leader known, the cluster
// secret replicated), for at most 20 s.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 20s (last: %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCLIFailsFastWithoutQuorum: on a 3-node cluster that lost two nodes, the HTTP API
// answers 503 NoLeader within about a second, and so must the CLI — it once retried 8
// times, a second apart each, and took 12.9 s. It tries once more after the server's
// Retry-After (an election may be ending) and then says what the server said, whether
// -addr names the survivor alone or the dead nodes too.
func TestCLIFailsFastWithoutQuorum(t *testing.T) {
	agents := startCLICluster(t, 3)
	survivor := agents[0].HTTPAddr()
	all := []string{survivor, agents[1].HTTPAddr(), agents[2].HTTPAddr()}
	cliUntil(t, "put", "-addr", survivor, "k", "v")
	stopNode(agents, 1)
	stopNode(agents, 2)
	// The survivor notices (heartbeat timeout) and answers 503 NoLeader itself.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + survivor + "/v1/kv/k")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivor still answers without quorum (last: %v)", err)
		}
	}
	for _, addr := range []string{survivor, strings.Join(all, ",")} {
		start := time.Now()
		_, err := runCLI(t, "get", "-addr", addr, "k")
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "NoLeader") {
			t.Errorf("get -addr %s without quorum = %v, want the server's 503 NoLeader", addr, err)
		}
		if took > 3*time.Second {
			t.Errorf("get -addr %s without quorum failed after %v, want about the server's own second (at most 3 s)", addr, took.Round(100*time.Millisecond))
		}
	}
}
