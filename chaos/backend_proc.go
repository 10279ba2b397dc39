package chaos

import (
	"context"
	"fmt"
	"sync/atomic"
)

// ProcBackend runs scenarios on keel processes on loopback. Each cluster gets its own
// 127.<subnet>.0.0/24 so consecutive runs never reuse an address.
type ProcBackend struct {
	Bin string
	// Remover removes a voter through a node's API (nil: remove and replace faults
	// are unsupported).
	Remover func(ctx context.Context, httpAddr, id, token string) error
	// TLS runs the clusters with TLS on every port (ProcConfig.TLS).
	TLS bool
	// ACL runs the clusters with access control on (ProcConfig.ACL).
	ACL bool
	// Etcd serves the etcd v3 API on every node (ProcConfig.Etcd).
	Etcd   bool
	subnet atomic.Int32
}

var _ Backend = (*ProcBackend)(nil)

// DiskSize is the tmpfs size of the disk-full scenario's node.
const DiskSize = 32 << 20

// Name implements Backend.
func (b *ProcBackend) Name() string {
	if b.TLS {
		return "process-tls"
	}
	return "process"
}

// Supports implements Backend.
func (b *ProcBackend) Supports(sc Scenario) error {
	if sc.Disk {
		if err := CanMount(); err != nil {
			return fmt.Errorf("scenario %s needs to mount a tmpfs (run as root on Linux): %w", sc.Name, err)
		}
	}
	for _, f := range sc.Faults {
		if (f.Kind == FaultRemove || f.Kind == FaultReplace) && b.Remover == nil {
			return fmt.Errorf("scenario %s: %w: keel has no API to remove a voter", sc.Name, ErrUnsupported)
		}
	}
	return nil
}

// Start implements Backend.
func (b *ProcBackend) Start(ctx context.Context, sc Scenario, dir string, logf func(string, ...any)) (Cluster, error) {
	cfg := DefaultProcConfig()
	cfg.Bin, cfg.Dir, cfg.Nodes, cfg.Logf, cfg.Remover = b.Bin, dir, sc.Nodes, logf, b.Remover
	cfg.Subnet = 100 + int(b.subnet.Add(1)%150)
	cfg.TLS = b.TLS
	cfg.ACL = b.ACL
	cfg.Etcd = b.Etcd
	if sc.Disk {
		cfg.DiskSize = DiskSize
	}
	for _, f := range sc.Faults {
		cfg.LogFaults = cfg.LogFaults || f.Kind == FaultLogIO
	}
	c, err := StartProcCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}
