// Command keelprof is a keel node with net/http/pprof on a side port, for profiling
// under the load generator: keel's own binary does not serve /debug/pprof. It wires
// cmd/keel/agent exactly as `keel agent` does (cmd/keel/agent.go) for the flags the
// load generator passes, so the node behaves the same.
//
//	keelprof agent -node-id k0 -data-dir D -http-addr A -raft-addr R [-bootstrap|-join R0] -pprof-addr P
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/tlsutil"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "version" {
		fmt.Println("keelprof (keel agent with /debug/pprof)")
		return
	}
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	def := agent.DefaultConfig()
	fs := flag.NewFlagSet("keelprof", flag.ExitOnError)
	nodeID := fs.String("node-id", "", "node ID")
	dataDir := fs.String("data-dir", "", "data directory")
	httpAddr := fs.String("http-addr", def.HTTPAddr, "HTTP API listen address")
	raftAddr := fs.String("raft-addr", def.Raft.BindAddr, "raft listen address")
	join := fs.String("join", "", "comma-separated raft addresses to join through")
	bootstrap := fs.Bool("bootstrap", false, "start a new cluster")
	pprofAddr := fs.String("pprof-addr", "", "serve /debug/pprof here (loopback)")
	logLevel := fs.String("log-level", "info", "log level")
	insecure := fs.Bool("insecure", false, "plain text (as keel agent -insecure)")
	caFile := fs.String("ca-file", "", "CA certificate")
	certFile := fs.String("cert-file", "", "node certificate")
	keyFile := fs.String("key-file", "", "node key")
	verifyClients := fs.Bool("verify-clients", false, "require client certificates")
	aclDefault := fs.String("acl-default", "", "allow or deny before ACLs are bootstrapped (as keel agent -acl-default)")
	maxLeases := fs.Int("max-leases", def.KV.MaxLeases, "live leases of the whole cluster (0: no bound), as keel agent -max-leases")
	etcdAddr := fs.String("etcd-addr", "", "etcd v3 gRPC API listen address (empty: none), as keel agent -etcd-addr")
	fs.Parse(args)

	log := hclog.New(&hclog.LoggerOptions{Name: "keel", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	cfg := agent.DefaultConfig()
	cfg.Logger = log
	cfg.NodeID = *nodeID
	cfg.DataDir = *dataDir
	cfg.HTTPAddr = *httpAddr
	cfg.Raft.BindAddr = *raftAddr
	cfg.Raft.Bootstrap = *bootstrap
	cfg.Insecure = *insecure
	cfg.TLS = tlsutil.Files{CAFile: *caFile, CertFile: *certFile, KeyFile: *keyFile}
	cfg.VerifyClients = *verifyClients
	if *aclDefault != "" {
		cfg.KV.ACLDefault = *aclDefault
	}
	cfg.KV.MaxLeases = *maxLeases
	cfg.EtcdAddr = *etcdAddr
	if *join != "" {
		cfg.Raft.Join = strings.Split(*join, ",")
	}
	if *pprofAddr != "" {
		runtime.SetMutexProfileFraction(100)
		runtime.SetBlockProfileRate(100_000) // one sample per 100µs blocked
		go func() { log.Error("pprof", "err", http.ListenAndServe(*pprofAddr, nil)) }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keelprof:", err)
		os.Exit(1)
	}
	select {
	case <-ctx.Done():
	case err = <-a.Done():
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := a.Close(cctx); cerr != nil || err != nil {
		fmt.Fprintln(os.Stderr, "keelprof:", cerr, err)
		os.Exit(1)
	}
}
