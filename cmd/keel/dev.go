package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/logging"
	"github.com/keel-kv/keel/versions"
)

// devPortStep is how far apart the nodes of `keel dev` listen: node i adds
// devPortStep·i to every port of the first node.
const devPortStep = 10

// devOptions configures `keel dev`.
type devOptions struct {
	nodes      int
	httpAddr   string // the first node's HTTP address; raft is +1, gossip +2
	schema     string
	logLevel   string
	logOutput  io.Writer
	keepData   bool
	startUntil time.Duration // how long the nodes may take to start
}

func newDevCmd() *cobra.Command {
	o := devOptions{logOutput: os.Stderr, startUntil: time.Minute}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a throwaway local cluster of -nodes nodes in one process (try failover by hand)",
		Long: `Run a throwaway cluster on this machine in one process: every node gets a fresh
temporary data dir, the nodes find each other by gossip and bootstrap together, and
Ctrl-C stops them all and removes the data dirs.

Node i (from 0) listens on the first node's ports plus 10·i: with the default
-http-addr 127.0.0.1:7370 the HTTP APIs are 7370, 7380, 7390, the Raft ports 7371,
7381, 7391 and gossip 7372, 7382, 7392.

  keel dev -nodes 3
  keel -addr 127.0.0.1:7370,127.0.0.1:7380,127.0.0.1:7390 members`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDev(ctx, o, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&o.nodes, "nodes", 3, "number of nodes (1 to 9)")
	fl.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:7370", "the first node's HTTP address; its Raft port is one above, gossip two above")
	fl.StringVar(&o.schema, "schema", "", "schema file (YAML) every node serves")
	fl.StringVar(&o.logLevel, "log-level", "warn", "trace, debug, info, warn or error")
	fl.BoolVar(&o.keepData, "keep-data", false, "leave the data dirs in place after Ctrl-C (their path is printed)")
	return cmd
}

// devNode is the addresses of one node of `keel dev`.
type devNode struct {
	id                          string
	http, raft, gossip, dataDir string
}

// devAddrs lays out the nodes' addresses: node i adds devPortStep·i to each port.
func devAddrs(httpAddr string, n int) ([]devNode, error) {
	host, portStr, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return nil, fmt.Errorf("dev: -http-addr %q: %w", httpAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port+devPortStep*(n-1)+2 > 65535 {
		return nil, fmt.Errorf("dev: -http-addr %q: want a port from 1 to %d", httpAddr, 65535-devPortStep*(n-1)-2)
	}
	at := func(p int) string { return net.JoinHostPort(host, strconv.Itoa(p)) }
	nodes := make([]devNode, n)
	for i := range nodes {
		p := port + devPortStep*i
		nodes[i] = devNode{id: fmt.Sprintf("n%d", i+1), http: at(p), raft: at(p + 1), gossip: at(p + 2)}
	}
	return nodes, nil
}

// runDev starts the cluster, prints where it listens, and stops it when ctx is done.
func runDev(ctx context.Context, o devOptions, out io.Writer) error {
	if o.nodes < 1 || o.nodes > 9 {
		return fmt.Errorf("dev: -nodes %d: want 1 to 9", o.nodes)
	}
	nodes, err := devAddrs(o.httpAddr, o.nodes)
	if err != nil {
		return err
	}
	var schema *versions.Schema
	if o.schema != "" {
		if schema, err = versions.LoadSchema(o.schema); err != nil {
			return err
		}
	}
	root, err := os.MkdirTemp("", "keel-dev-cluster-")
	if err != nil {
		return fmt.Errorf("dev: data dir: %w", err)
	}
	if !o.keepData {
		defer os.RemoveAll(root)
	}
	var gossip []string
	for _, n := range nodes {
		gossip = append(gossip, n.gossip)
	}
	log, err := logging.New(logging.Options{Name: "keel", Level: hclog.LevelFromString(o.logLevel), Output: o.logOutput})
	if err != nil {
		return err
	}

	agents := make([]*agent.Agent, len(nodes))
	defer func() { closeDev(agents, o.logOutput) }()
	startCtx, cancel := context.WithTimeout(ctx, o.startUntil)
	defer cancel()
	// The nodes start together: with gossip and -bootstrap-expect, each waits to see
	// the others before the first election.
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		nodes[i].dataDir = filepath.Join(root, nodes[i].id)
		cfg, err := devConfig(nodes[i], gossip, len(nodes), schema, log)
		if err != nil {
			return err
		}
		cfg.Insecure = true // a throwaway cluster on loopback: plain text, and it says so
		wg.Add(1)
		go func() {
			defer wg.Done()
			agents[i], errs[i] = agent.Start(startCtx, cfg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	fmt.Fprintf(out, "keel dev: %d nodes, data in %s\n", len(nodes), root)
	fmt.Fprintln(out, "  NODE  HTTP                RAFT                GOSSIP")
	addrs := ""
	for i, n := range nodes {
		fmt.Fprintf(out, "  %-4s  %-18s  %-18s  %s\n", n.id, n.http, n.raft, n.gossip)
		if i > 0 {
			addrs += ","
		}
		addrs += n.http
	}
	fmt.Fprintf(out, "try: keel -addr %s members\n", addrs)
	fmt.Fprintln(out, "Ctrl-C stops every node and removes the data dirs.")

	done := make(chan int, len(agents))
	for i, a := range agents {
		go func() {
			select {
			case <-a.Done():
			case <-a.Left():
			case <-ctx.Done():
				return
			}
			done <- i
		}()
	}
	stopped := 0
	for stopped < len(agents) {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "keel dev: stopping")
			// A requested stop: the nodes going away at once make Raft's transports log
			// errors about each other that mean nothing here. closeDev still reports a
			// node that fails to close.
			log.SetLevel(hclog.Off)
			return nil
		case i := <-done:
			stopped++
			fmt.Fprintf(out, "keel dev: node %s stopped\n", nodes[i].id)
		}
	}
	return nil
}

// devConfig is the agent config of one dev node.
func devConfig(n devNode, gossip []string, expect int, schema *versions.Schema, log hclog.Logger) (agent.Config, error) {
	cfg := agent.DefaultConfig()
	cfg.Logger = log.Named(n.id)
	cfg.NodeID = n.id
	cfg.DataDir = n.dataDir
	cfg.HTTPAddr = n.http
	cfg.Raft.BindAddr = n.raft
	cfg.Schema = schema
	if expect == 1 {
		cfg.Raft.Bootstrap = true
		return cfg, nil
	}
	g, err := gossipConfig(agentFlags{gossipAddr: n.gossip, join: gossip})
	if err != nil {
		return cfg, err
	}
	cfg.Gossip = g
	cfg.BootstrapExpect = expect
	return cfg, nil
}

// closeDev stops every started agent, all at once.
func closeDev(agents []*agent.Agent, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, a := range agents {
		if a == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Close(ctx); err != nil {
				fmt.Fprintf(out, "keel dev: node %s did not close cleanly: %v\n", a.NodeID(), err)
			}
		}()
	}
	wg.Wait()
}
