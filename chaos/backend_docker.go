package chaos

import (
	"context"
	"fmt"
	"sync"
)

// DockerBackend runs scenarios on containers built FROM scratch from a static keel
// binary, on a private bridge network per cluster. Call Close when done to remove the
// image.
type DockerBackend struct {
	Bin string
	// ACL runs the clusters with access control on: the nodes keep their default
	// (deny until bootstrapped), the harness bootstraps through the first node and
	// every harness client sends the management token.
	ACL bool

	once  sync.Once
	image string
	err   error
}

var _ Backend = (*DockerBackend)(nil)

// Name implements Backend.
func (b *DockerBackend) Name() string { return "docker" }

// Supports implements Backend: no tmpfs data dirs and no voter removal in containers;
// link faults need nsenter and iptables on the host; delay and loss use tc netem, or
// the host proxy where the kernel has no netem.
func (b *DockerBackend) Supports(sc Scenario) error {
	if sc.Disk {
		return fmt.Errorf("scenario %s: %w: disk-full runs on processes only", sc.Name, ErrUnsupported)
	}
	for _, f := range sc.Faults {
		switch f.Kind {
		case FaultKill, FaultPause, FaultAdd:
		case FaultIsolate, FaultSplit, FaultOneWay, FaultBridge:
			if !linkToolsAvailable() {
				return fmt.Errorf("scenario %s: %w: network faults in containers need nsenter and iptables", sc.Name, ErrUnsupported)
			}
		case FaultDelay, FaultDrop: // tc netem, or the host proxy without it
			if !linkToolsAvailable() {
				return fmt.Errorf("scenario %s: %w: delay and loss in containers need nsenter and iptables", sc.Name, ErrUnsupported)
			}
		default:
			return fmt.Errorf("scenario %s: %w: %s on containers", sc.Name, ErrUnsupported, f.Kind)
		}
	}
	return nil
}

// Start implements Backend (the image is built on first use).
func (b *DockerBackend) Start(ctx context.Context, sc Scenario, dir string, logf func(string, ...any)) (Cluster, error) {
	b.once.Do(func() { b.image, b.err = DockerImage(ctx, b.Bin) })
	if b.err != nil {
		return nil, b.err
	}
	var args []string
	if !b.ACL {
		args = aclArgs(b.Bin)
	}
	c, err := StartDockerCluster(ctx, b.image, dir, sc.Nodes, logf, b.ACL, args...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Close removes the image.
func (b *DockerBackend) Close() {
	if b.image != "" {
		RemoveImage(b.image)
	}
}
