package raft

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/raft/wal"
)

// Errors of replication. A write that fails with ErrNoLeader or ErrNotLeader was not
// applied; one that fails with ErrTimeout may or may not have been.
var (
	// ErrNoLeader: this node has no leader contact (see contact.go) and waited
	// LeaderWait for it in vain, or knew no leader until the request's deadline.
	ErrNoLeader  = errors.New("raft: no leader")
	ErrNotLeader = errors.New("raft: not the leader")
	ErrTimeout   = errors.New("raft: timed out, outcome unknown")
	ErrShutdown  = errors.New("raft: node is shut down")
	// ErrFormatNotAgreed: the command needs a log format some voter cannot apply yet
	// (a node of an older release); nothing was proposed. Retry after the upgrade.
	ErrFormatNotAgreed = errors.New("raft: command format not yet supported by every voter")
)

// Config configures one node's replication.
type Config struct {
	NodeID  string
	DataDir string
	// BindAddr carries Raft and keel's forwarding RPC on one TCP port.
	BindAddr string
	// AdvertiseAddr is the address other nodes dial; empty means BindAddr (or the bound
	// address when BindAddr has port 0).
	AdvertiseAddr string
	// Bootstrap starts a new one-node cluster if DataDir holds no Raft state.
	Bootstrap bool
	// Join lists raft addresses of members to ask to add this node, tried until one
	// answers, when DataDir holds no Raft state.
	Join []string
	// SourceIP, when set, is the local IP this node's outgoing Raft and RPC
	// connections come from (the port is the kernel's); by default the kernel picks it.
	// Tests that put a fault-injecting proxy between in-process nodes use it to tell
	// the nodes' connections apart.
	SourceIP string
	Logger   hclog.Logger
	// Observer receives the node's timings (WAL syncs, applied batches, AppendEntries
	// round trips) for an exporter; nil: none (metrics.go).
	Observer Observer
	// TLS, when set, makes the raft port mutual TLS: every peer shows a node
	// certificate signed by the cluster CA, a dialed node must be the node the
	// configuration lists at that address, and a peer may ask to add only itself
	// (unless it is a member already, forwarding a join). Certificates reload with
	// TLS.Reload. internal/tlsutil.Reloader implements it.
	TLS PeerTLS

	ApplyTimeout time.Duration // bound on one write's replication
	// LeaderWait bounds how long a request waits for leader contact when the node has
	// none (see contact.go) before it fails with ErrNoLeader; at most ApplyTimeout.
	LeaderWait       time.Duration
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// LeaderLeaseTimeout: a leader that has heard from no quorum for this long steps
	// down (at most HeartbeatTimeout). hashicorp/raft measures it in wall time, so a
	// leader starved of CPU counts its own starvation against its followers: at 500 ms
	// a 3-node cluster under a load of 40 on 2 cores lost its leader 4 times in 5
	// minutes where etcd (CheckQuorum over a 1 s election timeout, counted in ticks
	// that slow down with it) lost none (bench/README.md, "Elections under CPU
	// starvation"). Reads never rely on it (they confirm leadership, see read.go),
	// so the longer lease costs only how soon a cut-off leader stops answering.
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64 // log entries between snapshots
	SnapshotInterval   time.Duration
	TrailingLogs       uint64 // entries kept after a snapshot for slow followers

	// FormatsFromGossip: the embedding agent learns the command formats every voter
	// applies from gossip and sets them (SetCommandFormatLimit). Without it the node
	// asks every voter over RPC itself.
	FormatsFromGossip bool

	// LogFaults, for fault-injection tests only, is the path of a control file: while
	// it exists, the log store's writes or syncs fail as it says (wal.FaultFS).
	LogFaults string

	// noFormatsRPC (tests only) answers rpcFormats as a release before it did.
	noFormatsRPC bool
	// noApplyLeasesRPC (tests only) answers rpcApplyLeases as a release before it did.
	noApplyLeasesRPC bool
	// noApplyAsRPC (tests only) answers rpcApplyAs as a release before it did.
	noApplyAsRPC bool

	// wrapLogStore, when set (tests only), wraps the log store so a test can make it
	// fail the way a full disk does.
	wrapLogStore func(hraft.LogStore) hraft.LogStore
	// wrapLogFS, when set (tests only), wraps the file system the log lives on, so a
	// test can hold or fail one fdatasync at the moment it chooses.
	wrapLogFS func(wal.FS) wal.FS
}

// DefaultConfig suits a small cluster on one LAN.
func DefaultConfig() Config {
	return Config{
		BindAddr:           "127.0.0.1:7371",
		ApplyTimeout:       10 * time.Second,
		LeaderWait:         500 * time.Millisecond,
		HeartbeatTimeout:   1000 * time.Millisecond,
		ElectionTimeout:    1000 * time.Millisecond,
		LeaderLeaseTimeout: 1000 * time.Millisecond,
		SnapshotThreshold:  8192,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       10240,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("raft: node id is required")
	case c.DataDir == "":
		return errors.New("raft: data dir is required")
	case c.BindAddr == "":
		return errors.New("raft: bind address is required")
	case c.Bootstrap && len(c.Join) > 0:
		return errors.New("raft: bootstrap and join are exclusive: a node starts a cluster or joins one")
	}
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("raft: bind address %q: %w", c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		host, _, err := net.SplitHostPort(c.AdvertiseAddr)
		if err != nil {
			return fmt.Errorf("raft: advertise address %q: %w", c.AdvertiseAddr, err)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("raft: advertise address %q: must be reachable, not unspecified", c.AdvertiseAddr)
		}
	}
	if c.SourceIP != "" && net.ParseIP(c.SourceIP) == nil {
		return fmt.Errorf("raft: source IP %q is not an IP address", c.SourceIP)
	}
	if c.LeaderWait < 0 || (c.ApplyTimeout > 0 && c.LeaderWait > c.ApplyTimeout) {
		return fmt.Errorf("raft: leader wait %v must be in [0, apply timeout %v]", c.LeaderWait, c.ApplyTimeout)
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return fmt.Errorf("raft: join address %q: %w", j, err)
		}
	}
	return nil
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = d.ApplyTimeout
	}
	if c.LeaderWait <= 0 {
		c.LeaderWait = min(d.LeaderWait, c.ApplyTimeout)
	}
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.ElectionTimeout <= 0 {
		c.ElectionTimeout = d.ElectionTimeout
	}
	if c.LeaderLeaseTimeout <= 0 {
		c.LeaderLeaseTimeout = min(d.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = d.SnapshotThreshold
	}
	if c.SnapshotInterval <= 0 {
		c.SnapshotInterval = d.SnapshotInterval
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = d.TrailingLogs
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
}
