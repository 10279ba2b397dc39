package chaos

// Disk and Raft log faults of the process backend.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DiskNode implements Cluster.
func (c *ProcCluster) DiskNode() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.mu.nodes {
		if n.tmpfs {
			return id
		}
	}
	return ""
}

// FillDisk implements Cluster: write a filler file until the tmpfs is full.
func (c *ProcCluster) FillDisk(id string) error {
	n := c.node(id)
	if !n.tmpfs {
		return fmt.Errorf("fill disk of %s: %w (not a tmpfs)", id, ErrUnsupported)
	}
	return fillFile(n.fillerPath)
}

// FreeDisk implements Cluster.
func (c *ProcCluster) FreeDisk(id string) error {
	n := c.node(id)
	if err := os.Remove(n.fillerPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("free disk of %s: %w", id, err)
	}
	return nil
}

// logControl is the node's -test-log-faults control file.
func (c *ProcCluster) logControl(id string) string {
	return filepath.Join(c.cfg.Dir, id+".logfaults")
}

// FailLog implements Cluster.
func (c *ProcCluster) FailLog(ctx context.Context, id, mode string) (func() error, error) {
	if !c.cfg.LogFaults {
		return nil, fmt.Errorf("fail the log of %s: %w (nodes started without -test-log-faults)", id, ErrUnsupported)
	}
	_, slow := slowLogFault(mode)
	if mode != "sync" && mode != "write" && !slow {
		return nil, fmt.Errorf("fail the log of %s: unknown mode %q", id, mode)
	}
	n := c.node(id)
	c.mu.Lock()
	running := n.running && !n.paused
	if running && !slow {
		// A failed fdatasync must stop the node, and so must a failed append after a
		// deleted suffix (raft/wal): an exit now is the fault working, not a crash.
		n.stopping = true
	}
	logPath := n.logPath
	c.mu.Unlock()
	if !running {
		return nil, fmt.Errorf("fail the log of %s: %w", id, ErrNotRunning)
	}
	before := fileSize(logPath)
	slowBefore := -1
	if slow {
		slowBefore = c.slowSyncs(ctx, id)
	}
	control := c.logControl(id)
	if err := os.WriteFile(control, []byte(mode), 0o644); err != nil {
		return nil, fmt.Errorf("fail the log of %s: %w", id, err)
	}
	heal := func() error {
		if err := os.Remove(control); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		c.mu.Lock()
		running := n.running
		if running {
			n.stopping = false
		}
		c.mu.Unlock()
		switch {
		case slow && !running:
			return fmt.Errorf("%s stopped while its raft log's fdatasync was slow (%s)", id, mode)
		case slow:
			if after := c.slowSyncs(ctx, id); slowBefore < 0 || after <= slowBefore {
				return fmt.Errorf("no raft log fdatasync of %s took longer than 128 ms while it was slow (%s): "+
					"keel_disk_wal_fsync_duration_seconds counted %d such, then %d", id, mode, slowBefore, after)
			}
			return nil
		case mode == "sync" && running:
			return fmt.Errorf("%s kept running after its raft log's fdatasync failed", id)
		case mode == "write" && !logSince(logPath, before, "injected: input/output error"):
			return fmt.Errorf("no raft log write of %s met the injected error", id)
		case !running:
			return c.Start(ctx, id)
		}
		return nil
	}
	return heal, nil
}

// slowLogFault reads a FaultLogIO mode "slow=DUR" (wal.FaultFS's word for a slow
// disk): DUR, and whether mode is one.
func slowLogFault(mode string) (dur string, ok bool) { return strings.CutPrefix(mode, "slow=") }

// slowSyncs is how many of the node's raft log fdatasyncs took longer than 128 ms, by
// its keel_disk_wal_fsync_duration_seconds histogram (-1 when /metrics does not
// answer): what a slow=DUR fault of 128 ms or more must raise.
func (c *ProcCluster) slowSyncs(ctx context.Context, id string) int {
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := c.Client(id).Metrics(mctx)
	if err != nil {
		return -1
	}
	const h = "keel_disk_wal_fsync_duration_seconds"
	count, fast := metricValue(m, h+"_count"), metricValue(m, h+`_bucket{le="0.128"}`)
	if count < 0 || fast < 0 {
		return -1
	}
	return count - fast
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince reports whether path holds needle after offset from.
func logSince(path string, from int64, needle string) bool {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return false
	}
	return strings.Contains(string(b[from:]), needle)
}
