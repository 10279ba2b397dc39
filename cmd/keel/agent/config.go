package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Config is one node's configuration: where its data lives, what it listens on, and how
// it finds its cluster.
type Config struct {
	// NodeID names the node for its whole life. Empty: the ID stored in DataDir, or a new
	// random one on first start (then stored). A stored ID that differs is an error.
	NodeID   string
	DataDir  string
	HTTPAddr string // default 127.0.0.1:7370
	// EtcdAddr, when set, serves the etcd v3 gRPC API there (etcdv3.Server), with the
	// HTTP port's TLS, client-certificate rule and ACLs; empty serves none.
	EtcdAddr string
	// EtcdProgressNotifyInterval is how often an idle etcd watch created with
	// progress_notify hears the revision it reached (etcdv3.Server's); zero: the default.
	EtcdProgressNotifyInterval time.Duration

	Raft   raft.Config
	KV     kv.Config
	Logger hclog.Logger

	// Gossip turns on membership (memberlist) when set; NodeID is filled in.
	Gossip *membership.Config
	// BootstrapExpect (with Gossip) bootstraps a new cluster once this many servers
	// with the same expectation are seen and none has Raft state.
	BootstrapExpect int
	Autopilot       AutopilotConfig

	// Schema declares the node's resources (-schema); nil serves no /apis resources.
	Schema *versions.Schema
	// SchemaFile is the file Schema was loaded from: Reload (SIGHUP) reads it again.
	SchemaFile string
	// Versions tunes the storage-version loops; NodeID, Schema, Store are filled in.
	Versions versions.Config
	// Migrate tunes the storage-version migrator (the leader rewrites objects into the
	// common encoding version); Schema, Store and Logger are filled in. Its Rate and
	// NoAuto are only the initial cluster-wide settings (see migrate.Settings).
	Migrate migrate.Config
	// NoMigrate makes automatic migrations off in the initial cluster-wide settings:
	// old-version objects move only when rewritten or when an operator starts one.
	NoMigrate bool
	// OTLPEndpoint, when set, is an OpenTelemetry collector's OTLP/HTTP base URL
	// ("http://127.0.0.1:4318"): the migrator's spans are sent there (internal/tracing).
	// Empty (the default): no tracing.
	OTLPEndpoint string
	// TLS names the CA, certificate and key of the node: HTTPS (and the stream
	// protocol) on the HTTP port, mutual TLS on the Raft port, and gossip must be
	// encrypted. The certificate must be a node certificate (keel://node/<id>); when
	// NodeID is empty and the data dir holds none, the node takes the certificate's ID.
	TLS tlsutil.Files
	// VerifyClients makes the HTTP port require client certificates signed by the CA.
	VerifyClients bool
	// Insecure records that the operator chose plain text outside dev mode: logged
	// and shown in /v1/status. (The refusal to start without it is the CLI's.)
	Insecure bool

	// MaxCommandFormat, when > 0, makes the node announce (and propose) no command
	// format newer than this: what a node of an older release does. For upgrade tests.
	MaxCommandFormat int
}

// DefaultConfig returns a config for a node on loopback with the default ports.
func DefaultConfig() Config {
	return Config{
		HTTPAddr:  "127.0.0.1:7370",
		Raft:      raft.DefaultConfig(),
		KV:        kv.DefaultConfig(),
		Autopilot: DefaultAutopilotConfig(),
		Versions:  versions.DefaultConfig(),
	}
}

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Validate checks each field and names the bad value.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("agent: data dir is required")
	}
	if c.NodeID != "" && !nodeIDPattern.MatchString(c.NodeID) {
		return fmt.Errorf("agent: node id %q: want 1-63 of [A-Za-z0-9._-], starting with a letter or digit", c.NodeID)
	}
	if c.HTTPAddr == "" {
		return errors.New("agent: http address is required")
	}
	// Two requests for any free port (":0") get two ports: only a fixed one can clash.
	if c.EtcdAddr != "" && c.EtcdAddr == c.HTTPAddr && !strings.HasSuffix(c.EtcdAddr, ":0") {
		return fmt.Errorf("agent: etcd address %s is the HTTP address: each needs its own port", c.EtcdAddr)
	}
	if c.BootstrapExpect < 0 {
		return fmt.Errorf("agent: bootstrap-expect %d: want 0 (off) or a server count", c.BootstrapExpect)
	}
	if c.BootstrapExpect > 0 && c.Gossip == nil {
		return errors.New("agent: bootstrap-expect needs gossip (a gossip address)")
	}
	if c.TLS.Enabled() {
		if err := c.TLS.Validate(); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		if c.TLS.CertFile == "" {
			return errors.New("agent: TLS needs the node's certificate and key (-cert-file, -key-file), not only -ca-file")
		}
		if c.Gossip != nil && len(c.Gossip.EncryptKey) == 0 {
			return errors.New("agent: with TLS on, gossip must be encrypted too: pass -encrypt KEY " +
				"(the same on every node; make one with keel tls gossip-key)")
		}
	}
	if c.VerifyClients && !c.TLS.Enabled() {
		return errors.New("agent: -verify-clients needs TLS (-ca-file, -cert-file, -key-file)")
	}
	if c.Insecure && c.TLS.Enabled() {
		return errors.New("agent: -insecure and TLS files are exclusive: choose one")
	}
	if c.BootstrapExpect > 0 && c.Raft.Bootstrap {
		return errors.New("agent: bootstrap and bootstrap-expect are exclusive")
	}
	// The HTTP server's limits, before anything is written to the data dir (its
	// address is the listener's, known later).
	kcfg := c.KV
	kcfg.Addr = c.HTTPAddr
	if err := kcfg.Validate(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

const nodeIDFile = "node-id"

// loadOrCreateNodeID returns the node ID stored in dir, creating dir and the ID file on
// first start. want, when set, must match a stored ID: a data dir belongs to one node.
func loadOrCreateNodeID(dir, want string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored := strings.TrimSpace(string(b))
		if !nodeIDPattern.MatchString(stored) {
			return "", fmt.Errorf("agent: %s holds %q, not a node id: the data dir is corrupt or not keel's", path, stored)
		}
		if want != "" && want != stored {
			return "", fmt.Errorf("agent: data dir %s belongs to node %q, not %q", dir, stored, want)
		}
		return stored, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read node id: %w", err)
	}
	id := want
	if id == "" {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("generate node id: %w", err)
		}
		id = "node-" + hex.EncodeToString(r[:])
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write node id: %w", err)
	}
	return id, nil
}
