package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/internal/agent"
)

type agentFlags struct {
	nodeID, dataDir, httpAddr, raftAddr, advertise, logLevel string
	join                                                     []string
	dev, bootstrap                                           bool
	maxValueBytes                                            int64
	shutdownTimeout                                          time.Duration
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	def := agent.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a keel node",
		Long: `Run a keel node.

  keel agent -dev                                   one node, data in a fresh temp dir
  keel agent -data-dir D -bootstrap                 start a new cluster
  keel agent -data-dir D -join 127.0.0.1:7371       join a cluster through any member
  keel agent -data-dir D                            restart a node with existing data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runAgent(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nodeID, "node-id", "", "node ID (default: stored in the data dir, or generated)")
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (required unless -dev)")
	fl.StringVar(&f.httpAddr, "http-addr", def.HTTPAddr, "HTTP API listen address")
	fl.StringVar(&f.raftAddr, "raft-addr", def.Raft.BindAddr, "Raft and forwarding listen address")
	fl.StringVar(&f.advertise, "advertise", "", "Raft address other nodes dial (default: -raft-addr)")
	fl.StringSliceVar(&f.join, "join", nil, "Raft addresses of existing members to join through (comma-separated)")
	fl.BoolVar(&f.bootstrap, "bootstrap", false, "start a new cluster with this node as its first voter")
	fl.BoolVar(&f.dev, "dev", false, "dev mode: one bootstrapped node, data in a fresh temp dir unless -data-dir")
	fl.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fl.Int64Var(&f.maxValueBytes, "max-value-bytes", def.KV.MaxValueBytes, "largest accepted value")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop may take")
	return cmd
}

func runAgent(ctx context.Context, f agentFlags) error {
	log := hclog.New(&hclog.LoggerOptions{Name: "keel", Level: hclog.LevelFromString(f.logLevel), Output: os.Stderr})
	cfg := agent.DefaultConfig()
	cfg.Logger = log
	cfg.NodeID = f.nodeID
	cfg.DataDir = f.dataDir
	cfg.HTTPAddr = f.httpAddr
	cfg.Raft.BindAddr = f.raftAddr
	cfg.Raft.AdvertiseAddr = f.advertise
	cfg.Raft.Bootstrap = f.bootstrap || f.dev
	cfg.Raft.Join = f.join
	cfg.KV.MaxValueBytes = f.maxValueBytes
	if f.dev && cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "keel-dev-")
		if err != nil {
			return fmt.Errorf("dev data dir: %w", err)
		}
		cfg.DataDir = dir
	}
	if cfg.DataDir == "" {
		return fmt.Errorf("agent: -data-dir is required (or use -dev)")
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "keel node %s serving http://%s (raft %s, data dir %s)\n",
		a.NodeID(), a.HTTPAddr(), a.RaftAddr(), cfg.DataDir)
	if f.dev {
		fmt.Fprintf(os.Stdout, "try: curl -X PUT http://%s/v1/kv/hello -d world && curl http://%s/v1/kv/hello?raw=true\n",
			a.HTTPAddr(), a.HTTPAddr())
	}
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("signal received, stopping gracefully")
	case serveErr = <-a.Done():
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := a.Close(closeCtx); err != nil {
		return err
	}
	return serveErr
}
