package membership

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
)

// DefaultBindAddr is the gossip (UDP and TCP) address a node listens on by default.
const DefaultBindAddr = "127.0.0.1:7372"

// Config configures one node's gossip membership. Start from DefaultConfig (LAN) or
// DefaultLoopbackConfig (fast timings for tests and dev on one host).
type Config struct {
	// NodeID is the node's unique name in the cluster (its memberlist name). A node
	// restarted or rebuilt under the same NodeID takes over its old identity.
	NodeID string
	// BindAddr is the gossip listen address, host:port (UDP and TCP on the same port).
	// Port 0 picks a free port (tests); Local().Addr reports the real one.
	BindAddr string
	// AdvertiseAddr is the gossip address announced to peers, IP:port. Empty: the bound
	// address (a private IP if BindAddr is 0.0.0.0). Port 0: the bound port.
	AdvertiseAddr string
	// Join lists gossip addresses (host:port) of existing members to join at Open.
	Join []string
	// RetryJoin makes Open return at once and keep trying Join in the background with
	// exponential backoff from RetryJoinMinBackoff to RetryJoinMaxBackoff until one
	// succeeds or Close (see Membership.RetryJoin). Without it Open fails if Join fails.
	RetryJoin           bool
	RetryJoinMinBackoff time.Duration
	RetryJoinMaxBackoff time.Duration
	// EncryptKey enables AES-GCM gossip encryption (16, 24 or 32 bytes: AES-128/192/256).
	// Nodes with different keys cannot talk. Empty: no encryption.
	EncryptKey []byte
	// ClusterLabel is prefixed to every gossip packet and stream (memberlist's Label,
	// GCM-authenticated when encrypted) and carried in the metadata; nodes of clusters
	// with different labels never merge even when they reach each other's ports.
	ClusterLabel string
	// Logger receives memberlist's log lines (through hclog's StandardLogger with
	// inferred levels) and this package's. Nil: hclog.Default().
	Logger hclog.Logger

	// Failure detection and dissemination, passed to memberlist (see its Config).
	// Failure of a node is declared about ProbeInterval × members +
	// SuspicionMult × ProbeInterval after it stops answering.
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	IndirectChecks          int
	RetransmitMult          int
	GossipInterval          time.Duration
	GossipNodes             int
	GossipToTheDeadTime     time.Duration
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
	// DeadNodeReclaimTime is how long a node must have been dead before a node with the
	// same NodeID at another address may take its name (a wiped or moved node
	// rejoining). A restart at the same address needs no wait.
	DeadNodeReclaimTime time.Duration

	// DeadRetention is how long Members keeps reporting dead and left members (with
	// their LastChange), so a reconciler can reap nodes dead longer than its threshold.
	DeadRetention time.Duration
	// EventBuffer is the capacity of the Events channel.
	EventBuffer int
	// BroadcastTimeout bounds how long UpdateMeta and Leave wait for their broadcast
	// when the ctx has no earlier deadline.
	BroadcastTimeout time.Duration
}

// DefaultConfig returns settings for a LAN: memberlist's DefaultLANConfig timings
// (1 s probes, 500 ms probe timeout, 30 s full syncs), a 10 s DeadNodeReclaimTime and
// a 24 h DeadRetention. NodeID must still be set.
func DefaultConfig() Config {
	lan := memberlist.DefaultLANConfig()
	return Config{
		BindAddr:                DefaultBindAddr,
		RetryJoinMinBackoff:     time.Second,
		RetryJoinMaxBackoff:     30 * time.Second,
		ProbeInterval:           lan.ProbeInterval,
		ProbeTimeout:            lan.ProbeTimeout,
		SuspicionMult:           lan.SuspicionMult,
		SuspicionMaxTimeoutMult: lan.SuspicionMaxTimeoutMult,
		IndirectChecks:          lan.IndirectChecks,
		RetransmitMult:          lan.RetransmitMult,
		GossipInterval:          lan.GossipInterval,
		GossipNodes:             lan.GossipNodes,
		GossipToTheDeadTime:     lan.GossipToTheDeadTime,
		PushPullInterval:        lan.PushPullInterval,
		TCPTimeout:              lan.TCPTimeout,
		DeadNodeReclaimTime:     10 * time.Second,
		DeadRetention:           24 * time.Hour,
		EventBuffer:             256,
		BroadcastTimeout:        5 * time.Second,
	}
}

// DefaultLoopbackConfig returns DefaultConfig tuned for nodes on one host (tests,
// `keel agent -dev`): 200 ms probes, failures declared within about 2 s, fast
// gossip and full syncs, and a 500 ms DeadNodeReclaimTime.
func DefaultLoopbackConfig() Config {
	c := DefaultConfig()
	c.RetryJoinMinBackoff = 50 * time.Millisecond
	c.RetryJoinMaxBackoff = time.Second
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 3
	c.SuspicionMaxTimeoutMult = 3
	c.IndirectChecks = 1
	c.RetransmitMult = 3
	c.GossipInterval = 50 * time.Millisecond
	c.GossipToTheDeadTime = 2 * time.Second
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = time.Second
	c.DeadNodeReclaimTime = 500 * time.Millisecond
	c.BroadcastTimeout = 2 * time.Second
	return c
}

// Validate reports the first bad setting, naming the field and its value.
func (c Config) Validate() error {
	if err := validateNodeID(c.NodeID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return fmt.Errorf("%w: BindAddr %q: %w", ErrInvalidConfig, c.BindAddr, err)
	}
	if c.AdvertiseAddr != "" {
		host, _, err := splitHostPort(c.AdvertiseAddr)
		if err == nil && net.ParseIP(host) == nil {
			err = fmt.Errorf("host must be an IP address")
		}
		if err != nil {
			return fmt.Errorf("%w: AdvertiseAddr %q: %w", ErrInvalidConfig, c.AdvertiseAddr, err)
		}
	}
	for i, a := range c.Join {
		if a == "" {
			return fmt.Errorf("%w: Join[%d] is empty", ErrInvalidConfig, i)
		}
	}
	if c.RetryJoin && len(c.Join) == 0 {
		return fmt.Errorf("%w: RetryJoin needs Join addresses", ErrInvalidConfig)
	}
	if c.RetryJoin && (c.RetryJoinMinBackoff <= 0 || c.RetryJoinMaxBackoff < c.RetryJoinMinBackoff) {
		return fmt.Errorf("%w: RetryJoinMinBackoff %v and RetryJoinMaxBackoff %v must satisfy 0 < min <= max",
			ErrInvalidConfig, c.RetryJoinMinBackoff, c.RetryJoinMaxBackoff)
	}
	if n := len(c.EncryptKey); n != 0 {
		if err := memberlist.ValidateKey(c.EncryptKey); err != nil {
			return fmt.Errorf("%w: EncryptKey is %d bytes, want 16, 24 or 32", ErrInvalidConfig, n)
		}
	}
	if len(c.ClusterLabel) > memberlist.LabelMaxSize {
		return fmt.Errorf("%w: ClusterLabel is %d bytes, limit %d", ErrInvalidConfig, len(c.ClusterLabel), memberlist.LabelMaxSize)
	}
	return c.validateTimings()
}

func (c Config) validateTimings() error {
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval}, {"ProbeTimeout", c.ProbeTimeout},
		{"GossipInterval", c.GossipInterval}, {"TCPTimeout", c.TCPTimeout},
		{"BroadcastTimeout", c.BroadcastTimeout}, {"DeadRetention", c.DeadRetention},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%w: %s %v must be > 0", ErrInvalidConfig, p.name, p.d)
		}
	}
	switch {
	case c.ProbeTimeout >= c.ProbeInterval:
		return fmt.Errorf("%w: ProbeTimeout %v must be < ProbeInterval %v", ErrInvalidConfig, c.ProbeTimeout, c.ProbeInterval)
	case c.SuspicionMult < 1:
		return fmt.Errorf("%w: SuspicionMult %d must be >= 1", ErrInvalidConfig, c.SuspicionMult)
	case c.SuspicionMaxTimeoutMult < 1:
		return fmt.Errorf("%w: SuspicionMaxTimeoutMult %d must be >= 1", ErrInvalidConfig, c.SuspicionMaxTimeoutMult)
	case c.IndirectChecks < 0 || c.RetransmitMult < 1 || c.GossipNodes < 1:
		return fmt.Errorf("%w: IndirectChecks %d >= 0, RetransmitMult %d >= 1 and GossipNodes %d >= 1 required",
			ErrInvalidConfig, c.IndirectChecks, c.RetransmitMult, c.GossipNodes)
	case c.PushPullInterval < 0 || c.GossipToTheDeadTime < 0 || c.DeadNodeReclaimTime < 0:
		return fmt.Errorf("%w: PushPullInterval %v, GossipToTheDeadTime %v and DeadNodeReclaimTime %v must be >= 0",
			ErrInvalidConfig, c.PushPullInterval, c.GossipToTheDeadTime, c.DeadNodeReclaimTime)
	case c.EventBuffer < 1:
		return fmt.Errorf("%w: EventBuffer %d must be >= 1", ErrInvalidConfig, c.EventBuffer)
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q out of range", p)
	}
	return host, port, nil
}

// memberlistConfig translates a validated Config; d serves every delegate hook.
func (c Config) memberlistConfig(logger hclog.Logger, d *delegate) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeID
	mc.BindAddr, mc.BindPort, _ = splitHostPort(c.BindAddr)
	mc.AdvertisePort = mc.BindPort
	if c.AdvertiseAddr != "" {
		var port int
		mc.AdvertiseAddr, port, _ = splitHostPort(c.AdvertiseAddr)
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	mc.Label = c.ClusterLabel
	if len(c.EncryptKey) > 0 {
		mc.SecretKey = append([]byte(nil), c.EncryptKey...)
	}
	mc.ProbeInterval, mc.ProbeTimeout = c.ProbeInterval, c.ProbeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = c.SuspicionMult, c.SuspicionMaxTimeoutMult
	mc.IndirectChecks, mc.RetransmitMult = c.IndirectChecks, c.RetransmitMult
	mc.GossipInterval, mc.GossipNodes = c.GossipInterval, c.GossipNodes
	mc.GossipToTheDeadTime, mc.PushPullInterval = c.GossipToTheDeadTime, c.PushPullInterval
	mc.TCPTimeout, mc.DeadNodeReclaimTime = c.TCPTimeout, c.DeadNodeReclaimTime
	mc.Logger = logger.Named("memberlist").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	mc.Delegate, mc.Events, mc.Alive, mc.Merge, mc.Conflict = d, d, d, d, d
	return mc
}
