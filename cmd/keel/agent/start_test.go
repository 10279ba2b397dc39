package agent

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestFailedStartLeavesNothingRunning starts an agent whose gossip port is taken. By
// then its HTTP listener, raft node, compactor and metrics are running; Start must stop
// them all: the goroutine count comes back to where it was, the HTTP and Raft ports can
// be bound again, and the data directory opens again (raft's bolt file lock is free).
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	dir := t.TempDir()
	cfg := newGossipConfig(t, dir, "n1", 1)
	cfg.HTTPAddr = freeAddr(t)
	cfg.Gossip.RetryJoin = false // nobody to join: a one-node cluster
	taken, err := net.Listen("tcp", cfg.Gossip.BindAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	baseline := runtime.NumGoroutine()
	a, err := Start(context.Background(), cfg)
	if err == nil {
		a.Close(context.Background())
		t.Fatal("Start succeeded with its gossip port taken")
	}
	if !strings.Contains(err.Error(), "gossip") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start failed with %v, want the gossip port in use", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline {
		if time.Now().After(deadline) {
			var stacks bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("%d goroutines after the failed start, %d before:\n%s", runtime.NumGoroutine(), baseline, stacks.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, addr := range []string{cfg.HTTPAddr, cfg.Raft.BindAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port still held after the failed start: %v", err)
		}
		ln.Close()
	}
	// The same data directory starts (bolt would wait forever for a held lock).
	taken.Close()
	started := make(chan error, 1)
	go func() {
		a, err := Start(context.Background(), cfg)
		if err == nil {
			err = a.Close(context.Background())
		}
		started <- err
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("restart on %s: %v", filepath.Base(cfg.DataDir), err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("restart on the same data dir still waiting after 20s: the data dir lock was not released")
	}
}
