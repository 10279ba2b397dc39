package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-kv/keel/cmd/keel/agent"
	"github.com/keel-kv/keel/internal/logging"
	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/versions"
)

// gossipConfig builds the membership config from the flags: loopback timings on a
// loopback address, joins retried in the background so nodes may start in any order.
func gossipConfig(f agentFlags) (*membership.Config, error) {
	g := membership.DefaultConfig()
	if host, _, err := net.SplitHostPort(f.gossipAddr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			g = membership.DefaultLoopbackConfig()
		}
	}
	g.BindAddr = f.gossipAddr
	g.Join = append(append([]string(nil), f.join...), f.retryJoin...)
	g.RetryJoin = len(g.Join) > 0
	g.ClusterLabel = f.clusterLabel
	if f.encrypt != "" {
		key, err := base64.StdEncoding.DecodeString(f.encrypt)
		if err != nil {
			return nil, fmt.Errorf("agent: -encrypt: not base64: %w", err)
		}
		g.EncryptKey = key
	}
	return &g, nil
}

// limitFlags are the connection, request and watch bounds of kv.Config (kv/connlimits.go).
type limitFlags struct {
	conns, clientConns, inFlight, clientInFlight, streamInFlight, watches, streamWatches, tokenWatches int
	leases, tokenLeases                                                                                int
	requestBytes, clientRequestBytes                                                                   int64
}

// register adds the limit flags to fl, with def's values as their defaults.
func (l *limitFlags) register(fl *pflag.FlagSet, def kv.Config) {
	fl.IntVar(&l.conns, "max-conns", def.MaxConns, "client connections (HTTP and stream) open at once; one more is answered 429 and closed")
	fl.IntVar(&l.clientConns, "max-conns-per-client", def.MaxConnsPerClient, "client connections open at once from one source address (0: only -max-conns); one more is answered 429 and closed")
	fl.IntVar(&l.inFlight, "max-in-flight", def.MaxInFlight, "requests running at once (HTTP and every stream's); one more is answered 429")
	fl.IntVar(&l.clientInFlight, "max-in-flight-per-client", def.MaxInFlightPerClient, "requests running at once from one source address (0: only -max-in-flight); one more is answered 429")
	fl.IntVar(&l.streamInFlight, "max-stream-in-flight", def.MaxStreamInFlight, "requests in flight on one stream connection; beyond it the node stops reading that connection until one finishes")
	fl.IntVar(&l.watches, "max-watches", def.MaxWatches, "watches the node serves at once; one more is answered 429")
	fl.IntVar(&l.streamWatches, "max-stream-watches", def.MaxStreamWatches, "watches one stream connection carries at once (0: only -max-watches); one more is answered 429")
	fl.IntVar(&l.tokenWatches, "max-watches-per-token", def.MaxWatchesPerToken, "watches one ACL token holds on the node at once, over HTTP and streams (0: only -max-watches); one more is answered 429")
	fl.Int64Var(&l.requestBytes, "max-request-bytes-in-flight", def.MaxRequestBytesInFlight, "bytes of request bodies the node holds at once, on every port (0: no bound); a request over it is answered 429")
	fl.Int64Var(&l.clientRequestBytes, "max-request-bytes-in-flight-per-client", def.MaxRequestBytesInFlightPerClient, "bytes of request bodies one source address holds at once, on every port (0: only -max-request-bytes-in-flight); a request over it is answered 429")
	fl.IntVar(&l.leases, "max-leases", def.MaxLeases, "live leases of the whole cluster (0: no bound); a grant beyond it is answered 429")
	fl.IntVar(&l.tokenLeases, "max-leases-per-token", def.MaxLeasesPerToken, "live leases one ACL token granted through this node (0: only -max-leases); one more is answered 429")
}

// apply sets the bounds of c from the flags.
func (l limitFlags) apply(c *kv.Config) {
	c.MaxConns, c.MaxConnsPerClient, c.MaxInFlight, c.MaxInFlightPerClient = l.conns, l.clientConns, l.inFlight, l.clientInFlight
	c.MaxStreamInFlight, c.MaxWatches, c.MaxStreamWatches, c.MaxWatchesPerToken = l.streamInFlight, l.watches, l.streamWatches, l.tokenWatches
	c.MaxLeases, c.MaxLeasesPerToken = l.leases, l.tokenLeases
	c.MaxRequestBytesInFlight, c.MaxRequestBytesInFlightPerClient = l.requestBytes, l.clientRequestBytes
}

type agentFlags struct {
	nodeID, dataDir, httpAddr, raftAddr, advertise, logLevel string
	etcdAddr                                                 string
	logFormat                                                string
	etcdProgress                                             time.Duration
	join, retryJoin                                          []string
	dev, bootstrap, evenVoters                               bool
	gossipAddr, encrypt, clusterLabel                        string
	bootstrapExpect                                          int
	maxValueBytes                                            int64
	limits                                                   limitFlags
	shutdownTimeout                                          time.Duration
	schema, testLogFaults                                    string
	noMigrate, migrateDryRun                                 bool
	migrateRate                                              int
	otlpEndpoint                                             string
	versionGCAfter                                           time.Duration
	caFile, certFile, keyFile, crlFile                       string
	verifyClients, insecure                                  bool
	verifyClientsSet                                         bool // -verify-clients given explicitly
	aclDefault                                               string
}

func newAgentCmd() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a keel node",
		Long: `Run a keel node.

  keel agent -dev                                   one node, data in a fresh temp dir
  keel agent -data-dir D -bootstrap $TLS            start a new cluster
  keel agent -data-dir D -join 127.0.0.1:7371 $TLS  join a cluster through any member
  keel agent -data-dir D $TLS                       restart a node with existing data

where TLS="-ca-file keel-ca.pem -cert-file n1.pem -key-file n1-key.pem" (see keel tls).
Outside -dev a node refuses to run without TLS unless -insecure says so.

Every flag can also come from the environment: KEEL_ and its name in capitals, - as _
(KEEL_DATA_DIR=/data, KEEL_BOOTSTRAP_EXPECT=3, KEEL_JOIN=n1:7372,n2:7372); the command
line wins. The container image and the systemd unit in deploy/ are configured so.
KEEL_CA_FILE, KEEL_CERT_FILE and KEEL_KEY_FILE, which the CLI reads too, are ignored
by -dev and -insecure nodes.

With gossip (-gossip-addr, or -bootstrap-expect), -join and -retry-join name gossip
addresses, and one command line serves first start, restart and scale-out:

  keel agent -data-dir D -gossip-addr 127.0.0.1:7372 -bootstrap-expect 3 -join 127.0.0.1:7382,127.0.0.1:7392 $TLS -encrypt KEY`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := agentFlagsFromEnv(cmd.LocalFlags(), os.LookupEnv); err != nil {
				return err
			}
			f.verifyClientsSet = cmd.Flags().Changed("verify-clients")
			return runAgent(cmd.Context(), f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// agentFlagsFromEnv gives each agent flag not on the command line the value of its
// environment variable, if set and not empty: KEEL_ and the flag's name in capitals
// with _ for - (KEEL_DATA_DIR, KEEL_BOOTSTRAP_EXPECT, KEEL_JOIN=a,b), as etcd reads
// ETCD_*. A container or a systemd unit configures a node this way; the command line
// wins. KEEL_CA_FILE, KEEL_CERT_FILE and KEEL_KEY_FILE are the CLI's too (a shell may
// hold a client certificate there), so a -dev or -insecure node does not read them.
func agentFlagsFromEnv(fl *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	apply := func(tlsFiles bool) {
		fl.VisitAll(func(fv *pflag.Flag) {
			if fv.Changed || fv.Hidden || sharedTLSFlags[fv.Name] != tlsFiles {
				return
			}
			env := agentFlagEnv(fv.Name)
			if v, ok := lookup(env); ok && v != "" { // set but empty: unset, as etcd has it
				if err := fl.Set(fv.Name, v); err != nil {
					errs = append(errs, fmt.Errorf("%s=%q (for -%s): %w", env, v, fv.Name, err))
				}
			}
		})
	}
	apply(false)
	if dev, _ := fl.GetBool("dev"); !dev {
		if insecure, _ := fl.GetBool("insecure"); !insecure {
			apply(true)
		}
	}
	return errors.Join(errs...)
}

// sharedTLSFlags are the agent flags whose variables the CLI reads too.
var sharedTLSFlags = map[string]bool{"ca-file": true, "cert-file": true, "key-file": true}

// agentFlagEnv is the environment variable of agent flag name.
func agentFlagEnv(name string) string {
	return "KEEL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// register binds f to the agent's flags, with their defaults.
func (f *agentFlags) register(fl *pflag.FlagSet) {
	def := agent.DefaultConfig()
	fl.StringVar(&f.nodeID, "node-id", "", "node ID (default: stored in the data dir, or generated)")
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (required unless -dev)")
	fl.StringVar(&f.httpAddr, "http-addr", def.HTTPAddr, "HTTP API listen address")
	fl.StringVar(&f.etcdAddr, "etcd-addr", "", "etcd v3 gRPC API listen address (empty or off: none; -dev serves it on "+devEtcdAddr+" unless off)")
	fl.DurationVar(&f.etcdProgress, "etcd-watch-progress-notify-interval", etcdv3.DefaultProgressNotifyInterval,
		"how often an idle etcd watch created with progress_notify hears the revision it reached (etcd's --watch-progress-notify-interval)")
	fl.StringVar(&f.raftAddr, "raft-addr", def.Raft.BindAddr, "Raft and forwarding listen address")
	fl.StringVar(&f.advertise, "advertise", "", "Raft address other nodes dial (default: -raft-addr)")
	fl.StringSliceVar(&f.join, "join", nil, "members to join through (comma-separated): Raft addresses, or gossip addresses when gossip is on")
	fl.StringSliceVar(&f.retryJoin, "retry-join", nil, "gossip addresses to keep trying, with backoff, until one answers")
	fl.StringVar(&f.gossipAddr, "gossip-addr", "", "gossip (memberlist) listen address; turns gossip on (default with -bootstrap-expect: "+membership.DefaultBindAddr+")")
	fl.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0, "bootstrap a new cluster once this many servers are seen by gossip")
	fl.StringVar(&f.encrypt, "encrypt", "", "gossip encryption key, base64 of 16, 24 or 32 bytes")
	fl.BoolVar(&f.evenVoters, "autopilot-even-voters", false, "with gossip, let autopilot promote a server that makes the number of voters even (by default a 4th server waits as a non-voter until a 5th is ready)")
	fl.StringVar(&f.clusterLabel, "cluster-label", "", "gossip cluster label: clusters with different labels never merge")
	fl.BoolVar(&f.bootstrap, "bootstrap", false, "start a new cluster with this node as its first voter")
	fl.BoolVar(&f.dev, "dev", false, "dev mode: one bootstrapped node, data in a fresh temp dir unless -data-dir")
	fl.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", logging.FormatText, "text or json (one JSON object a line, with node and component fields)")
	fl.Int64Var(&f.maxValueBytes, "max-value-bytes", def.KV.MaxValueBytes, "largest accepted value")
	f.limits.register(fl, def.KV)
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful stop may take")
	fl.StringVar(&f.schema, "schema", "", "schema file (YAML) of the typed resources served under /apis; SIGHUP re-reads it (see keel schema apply)")
	fl.BoolVar(&f.noMigrate, "no-migrate", false, "initial cluster-wide setting: migrations start only when asked (keel migrate start); see keel migrate settings")
	fl.BoolVar(&f.migrateDryRun, "migrate-dry-run", false, "as leader, count what a migration would rewrite and write nothing")
	fl.IntVar(&f.migrateRate, "migrate-rate", 500, "initial cluster-wide setting: objects per second the migrator rewrites at most (-1: unlimited); see keel migrate settings")
	fl.DurationVar(&f.versionGCAfter, "version-gc-after", def.Versions.GCAfter, "as leader, remove the storage-version entries of a node gossip has declared dead this long ago")
	fl.StringVar(&f.caFile, "ca-file", "", "CA certificate (PEM) that signs every node's certificate; with -cert-file and -key-file turns TLS on for every port (SIGHUP reloads all three)")
	fl.StringVar(&f.certFile, "cert-file", "", "this node's certificate (PEM), made with keel tls cert create -node ID; its ID is the node's")
	fl.StringVar(&f.keyFile, "key-file", "", "key of -cert-file (PEM)")
	fl.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "send the migrator's trace spans (a span per migration step, chunk and key-migration phase step) to this OpenTelemetry collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318 (default: no tracing)")
	fl.StringVar(&f.crlFile, "crl-file", "", "the CA's certificate revocation list (PEM or DER, signed by -ca-file): a listed certificate is refused on every port (SIGHUP reloads it)")
	fl.BoolVar(&f.verifyClients, "verify-clients", true, "with TLS, HTTP clients must present a certificate signed by -ca-file (keel tls cert create -client NAME); -verify-clients=false lets any client reach the HTTP port, and the first to call keel acl bootstrap owns the cluster")
	fl.BoolVar(&f.insecure, "insecure", false, "run without TLS outside -dev: every port plain text, open to anyone who reaches it")
	fl.StringVar(&f.aclDefault, "acl-default", "", "what a cluster answers before keel acl bootstrap, `allow|deny` (deny: only health, status and bootstrap; default deny, allow with -dev)")
	fl.StringVar(&f.testLogFaults, "test-log-faults", "", "fault-injection tests only: a control file that, while it exists, makes the raft log's writes or syncs fail")
	_ = fl.MarkHidden("test-log-faults")
}

func runAgent(ctx context.Context, f agentFlags) error {
	log, err := logging.New(logging.Options{Name: "keel", Level: hclog.LevelFromString(f.logLevel), Format: f.logFormat,
		Output: os.Stderr})
	if err != nil {
		return err
	}
	cfg, tempDir, err := agentConfig(f, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := agent.Start(ctx, cfg)
	if err != nil {
		return err
	}
	// SIGHUP reloads the TLS files and re-reads -schema (as keel schema apply does, without force).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignal(ctx, hup, func(ctx context.Context) (*versions.SchemaChange, error) {
		if err := a.ReloadTLS(); err != nil {
			log.Error("TLS reload refused; the old certificates stay in use", "error", err)
		}
		if f.schema == "" {
			return nil, nil // SIGHUP only reloaded the certificates
		}
		return a.Reload(ctx)
	}, log)
	printServing(a, cfg, f.dev, tempDir != "")
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("signal received, stopping gracefully")
	case serveErr = <-a.Done():
	case <-a.Left():
		log.Info("left the cluster, stopping")
	case err := <-a.Node().LogFailed():
		serveErr = fmt.Errorf("the raft log store failed, so this node stopped writing and stepped down: %w; "+
			"restart it to recover from what is on disk (check the disk first)", err)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := a.Close(closeCtx); err != nil {
		return err
	}
	if serveErr == nil && tempDir != "" {
		if err := os.RemoveAll(tempDir); err != nil {
			log.Warn("could not remove the temporary data dir", "dir", tempDir, "error", err)
		}
	}
	return serveErr
}

// agentConfig turns the flags into the agent's configuration; tempDir is the -dev data
// dir it created, to be removed after a clean stop ("" when none).
func agentConfig(f agentFlags, log hclog.Logger) (cfg agent.Config, tempDir string, err error) {
	cfg = agent.DefaultConfig()
	cfg.Logger = log
	cfg.NodeID = f.nodeID
	cfg.DataDir = f.dataDir
	cfg.HTTPAddr = f.httpAddr
	cfg.EtcdAddr = etcdAddr(f, log)
	cfg.EtcdProgressNotifyInterval = f.etcdProgress
	cfg.Raft.BindAddr = f.raftAddr
	cfg.Raft.AdvertiseAddr = f.advertise
	cfg.Raft.Bootstrap = f.bootstrap || f.dev
	cfg.Raft.Join = f.join
	if f.gossipAddr == "" && (f.bootstrapExpect > 0 || len(f.retryJoin) > 0) {
		f.gossipAddr = membership.DefaultBindAddr
	}
	if f.gossipAddr != "" {
		g, err := gossipConfig(f)
		if err != nil {
			return cfg, "", err
		}
		cfg.Gossip = g
		cfg.Raft.Join = nil
		cfg.BootstrapExpect = f.bootstrapExpect
		cfg.Autopilot.EvenVoters = f.evenVoters
	}
	if err := securityConfig(&cfg, f); err != nil {
		return cfg, "", err
	}
	cfg.KV.MaxValueBytes = f.maxValueBytes
	f.limits.apply(&cfg.KV)
	if cfg.KV.ACLDefault, err = aclDefault(f); err != nil {
		return cfg, "", err
	}
	if f.maxValueBytes > cfg.KV.MaxTxnBodyBytes { // a transaction can carry one value that large
		cfg.KV.MaxTxnBodyBytes = min(2*f.maxValueBytes, kv.MaxRequestBytesLimit)
	}
	if f.schema != "" {
		s, err := versions.LoadSchema(f.schema)
		if err != nil {
			return cfg, "", err
		}
		cfg.Schema, cfg.SchemaFile = s, f.schema
	}
	cfg.NoMigrate = f.noMigrate
	if f.versionGCAfter <= 0 {
		return cfg, "", fmt.Errorf("-version-gc-after %v: want a duration > 0", f.versionGCAfter)
	}
	cfg.Versions.GCAfter = f.versionGCAfter
	cfg.Raft.LogFaults = f.testLogFaults
	cfg.Migrate.DryRun, cfg.Migrate.Rate = f.migrateDryRun, f.migrateRate
	cfg.OTLPEndpoint = f.otlpEndpoint
	if f.migrateRate == 0 {
		return cfg, "", errors.New("-migrate-rate 0 would never migrate: use -no-migrate (automatic migrations off)")
	}
	if f.dev && cfg.DataDir == "" {
		dir, err := os.MkdirTemp("", "keel-dev-")
		if err != nil {
			return cfg, "", fmt.Errorf("dev data dir: %w", err)
		}
		cfg.DataDir, tempDir = dir, dir
	}
	if cfg.DataDir == "" {
		return cfg, "", fmt.Errorf("agent: -data-dir is required (or use -dev)")
	}
	return cfg, tempDir, nil
}

// aclDefault is what the cluster answers before ACL bootstrap: -acl-default, else deny
// (allow with -dev).
func aclDefault(f agentFlags) (string, error) {
	switch f.aclDefault {
	case "":
		if f.dev {
			return kv.ACLAllow, nil
		}
		return kv.ACLDeny, nil
	case kv.ACLAllow, kv.ACLDeny:
		return f.aclDefault, nil
	}
	return "", fmt.Errorf("-acl-default %q: want allow or deny", f.aclDefault)
}

// printServing says where the node serves and what a newcomer should know.
func printServing(a *agent.Agent, cfg agent.Config, dev, tempDataDir bool) {
	scheme := "http"
	if a.TLSEnabled() {
		scheme = "https"
	}
	fmt.Fprintf(os.Stdout, "keel node %s serving %s://%s (raft %s, data dir %s)\n",
		a.NodeID(), scheme, a.HTTPAddr(), a.RaftAddr(), cfg.DataDir)
	if a.EtcdAddr() != "" {
		fmt.Fprintf(os.Stdout, "etcd v3 API on %s://%s (etcdctl --endpoints %s)\n", scheme, a.EtcdAddr(), a.EtcdAddr())
	}
	if cfg.KV.ACLDefault == kv.ACLDeny {
		fmt.Fprintf(os.Stdout, "ACL default deny: until `keel acl bootstrap`, this node answers only health, status and bootstrap\n")
	}
	if tempDataDir {
		fmt.Fprintf(os.Stdout, "the data dir is temporary: removed when the node stops cleanly (Ctrl-C); give -data-dir to keep the data\n")
	}
	if dev {
		fmt.Fprintf(os.Stdout, "try: curl -X PUT http://%s/v1/kv/hello -d world && curl http://%s/v1/kv/hello?raw=true\n",
			a.HTTPAddr(), a.HTTPAddr())
	}
}

// devEtcdAddr is where keel agent -dev serves the etcd v3 API: etcd's own client port,
// so that etcdctl works without flags.
const devEtcdAddr = "127.0.0.1:2379"

// etcdAddr is the etcd API address of -etcd-addr: "off" (or empty outside -dev) is
// none; -dev without it takes devEtcdAddr, or any free loopback port when that one is
// taken (another etcd, another dev node), and says so.
func etcdAddr(f agentFlags, log hclog.Logger) string {
	switch {
	case f.etcdAddr == "off":
		return ""
	case f.etcdAddr != "" || !f.dev:
		return f.etcdAddr
	}
	ln, err := net.Listen("tcp", devEtcdAddr)
	if err != nil {
		log.Warn("dev: the etcd port is taken; serving the etcd API on another free port", "port", devEtcdAddr, "error", err)
		return "127.0.0.1:0"
	}
	ln.Close()
	return devEtcdAddr
}

// errNoTLS is the refusal of a non-dev node without TLS: it says how to fix it.
var errNoTLS = errors.New("agent: no TLS configured, and keel does not run a cluster node in plain text by default.\n" +
	"  Secure (recommended): keel tls ca create && keel tls cert create -node ID, then\n" +
	"    keel agent -ca-file keel-ca.pem -cert-file ID.pem -key-file ID-key.pem ...\n" +
	"    (in a container: KEEL_CA_FILE, KEEL_CERT_FILE, KEEL_KEY_FILE; see deploy/README.md)\n" +
	"  Or accept that anyone who reaches the ports can read and change everything: add -insecure\n" +
	"  (keel agent -dev needs neither)")

// securityConfig applies the TLS flags, and refuses plain text outside -dev unless
// -insecure says so.
func securityConfig(cfg *agent.Config, f agentFlags) error {
	cfg.TLS = tlsutil.Files{CAFile: f.caFile, CertFile: f.certFile, KeyFile: f.keyFile, CRLFile: f.crlFile}
	// On by default with TLS (the first client to reach the port could otherwise win
	// the ACL bootstrap); asked for explicitly without TLS it is refused (Validate).
	cfg.VerifyClients = f.verifyClients && (cfg.TLS.Enabled() || f.verifyClientsSet)
	switch {
	case cfg.TLS.Enabled() && f.insecure:
		return errors.New("agent: -insecure and -ca-file/-cert-file/-key-file are exclusive: choose one")
	case cfg.TLS.Enabled():
	case f.insecure || f.dev:
		cfg.Insecure = true
	default:
		return errNoTLS
	}
	return nil
}
