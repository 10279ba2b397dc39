// Package raft replicates keel's state machine (package fsm) with hashicorp/raft: a
// bolt log and stable store, file snapshots, and one TCP port that carries both Raft
// and keel's own RPC (forwarded writes, read indexes, joins). It gives the rest of
// keel writes from any node, linearizable and serializable reads, and joins.
package raft

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
)

// Errors of replication. A write that fails with ErrNoLeader or ErrNotLeader was not
// applied; one that fails with ErrTimeout may or may not have been.
var (
	ErrNoLeader  = errors.New("raft: no leader")
	ErrNotLeader = errors.New("raft: not the leader")
	ErrTimeout   = errors.New("raft: timed out, outcome unknown")
	ErrShutdown  = errors.New("raft: node is shut down")
	// ErrFormatNotAgreed: the command needs a log format some voter cannot apply yet
	// (a node of an older release); nothing was proposed. Retry after the upgrade.
	ErrFormatNotAgreed = errors.New("raft: command format not yet supported by every voter")
)

// Consistency is what a read promises.
type Consistency int

const (
	// Linearizable reads reflect every write acknowledged before the read began.
	Linearizable Consistency = iota
	// Serializable reads return the local state: possibly stale, never torn.
	Serializable
)

func (c Consistency) String() string {
	if c == Serializable {
		return "serializable"
	}
	return "linearizable"
}

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
	Join   []string
	Logger hclog.Logger

	ApplyTimeout       time.Duration // bound on one write's replication
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64 // log entries between snapshots
	SnapshotInterval   time.Duration
	TrailingLogs       uint64 // entries kept after a snapshot for slow followers

	// wrapLogStore, when set (tests only), wraps the log store so a test can make it
	// fail the way a full disk does.
	wrapLogStore func(hraft.LogStore) hraft.LogStore
}

// DefaultConfig suits a small cluster on one LAN.
func DefaultConfig() Config {
	return Config{
		BindAddr:           "127.0.0.1:7371",
		ApplyTimeout:       10 * time.Second,
		HeartbeatTimeout:   1000 * time.Millisecond,
		ElectionTimeout:    1000 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
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
}
