package chaos

// The corrupt-log and lose-raft-state faults of the process backend: a follower's Raft
// log is damaged, or one part of its Raft state deleted, while it is down, and it comes
// back only through `keel rebuild`.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// rebuildAdvice is what a node refusing a damaged log must print.
const rebuildAdvice = "keel rebuild -data-dir"

// CorruptLog implements Cluster: kill the node, flip one byte halfway through its last
// WAL segment (a record good records follow: no torn write explains it), and check that
// a start refuses the log and names `keel rebuild`. heal runs `keel rebuild` through a
// live member, starts the node as before (no -join) and waits until the cluster lists
// every member as a voter again.
func (c *ProcCluster) CorruptLog(ctx context.Context, id string) (func() error, error) {
	n := c.node(id)
	if err := c.Kill(id); err != nil {
		return nil, err
	}
	seg, off, err := flipMidLastSegment(n.dataDir)
	if err != nil {
		return nil, fmt.Errorf("corrupt the log of %s: %w", id, err)
	}
	c.cfg.Logf("corrupt-log: %s: flipped a byte of %s at offset %d", id, seg, off)
	if err := c.startRefused(ctx, n, "damaged raft log", "seg-"); err != nil {
		return nil, err
	}
	return func() error { return c.rebuild(ctx, n) }, nil
}

// flipMidLastSegment flips one byte halfway through dataDir's last WAL segment.
func flipMidLastSegment(dataDir string) (string, int, error) {
	segs, err := filepath.Glob(filepath.Join(dataDir, "raft", "wal", "seg-*.wal"))
	if err != nil || len(segs) == 0 {
		return "", 0, fmt.Errorf("no WAL segment in %s (%v)", dataDir, err)
	}
	slices.Sort(segs)
	path := segs[len(segs)-1]
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	if len(b) < 4096 {
		return "", 0, fmt.Errorf("%s holds only %d bytes: too few records to damage one in the middle", path, len(b))
	}
	off := len(b) / 2
	b[off] ^= 0x40
	return path, off, os.WriteFile(path, b, 0o600)
}

// LoseState implements Cluster: kill the node, delete raft/wal/ or raft/raft.db of its
// data dir (issue #34: one part of the Raft state), and check that a start refuses,
// naming the part and `keel rebuild`. heal is CorruptLog's: keel rebuild, start as
// before, wait for every member to be a voter.
func (c *ProcCluster) LoseState(ctx context.Context, id, part string) (func() error, error) {
	var say string
	switch part {
	case "wal":
		say = filepath.Join("raft", "wal") + ") is missing" // "the log (<data dir>/raft/wal) is missing"
	case "raft.db":
		say = filepath.Join("raft", "raft.db") + ": term and vote) is missing"
	default:
		return nil, fmt.Errorf("lose-raft-state: unknown part %q (wal or raft.db)", part)
	}
	n := c.node(id)
	if err := c.Kill(id); err != nil {
		return nil, err
	}
	path := filepath.Join(n.dataDir, "raft", part)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("lose-raft-state: %w", err)
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, fmt.Errorf("lose-raft-state: %w", err)
	}
	c.cfg.Logf("lose-raft-state: %s: deleted %s", id, path)
	if err := c.startRefused(ctx, n, "raft/"+part+" deleted", say); err != nil {
		return nil, err
	}
	return func() error { return c.rebuild(ctx, n) }, nil
}

// startRefused starts the node on its damaged or partly lost state (what) and waits
// for it to exit naming the rebuild and say; an exit is expected, so it does not count
// as a crash.
func (c *ProcCluster) startRefused(ctx context.Context, n *procNode, what, say string) error {
	before := fileSize(n.logPath)
	c.mu.Lock()
	crashed := n.crashed
	c.mu.Unlock()
	if err := c.launch(n, false, nil); err != nil {
		return err
	}
	c.mu.Lock()
	n.stopping = true
	exited := n.exited
	c.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		c.Kill(n.id)
		return fmt.Errorf("%s started with %s (still running after 30s)", n.id, what)
	case <-ctx.Done():
		c.Kill(n.id)
		return ctx.Err()
	}
	c.mu.Lock()
	n.crashed = crashed
	exitErr := n.exitErr
	c.mu.Unlock()
	for _, s := range []string{rebuildAdvice, say} {
		if exitErr == nil || !logSince(n.logPath, before, s) {
			return fmt.Errorf("%s with %s: exit %v, without %q in its log", n.id, what, exitErr, s)
		}
	}
	return nil
}

// rebuild runs `keel rebuild` for n through a live member, then starts n and waits
// until every member is a voter again.
func (c *ProcCluster) rebuild(ctx context.Context, n *procNode) error {
	var peer string
	for _, id := range c.Members() {
		if o := c.node(id); id != n.id && o.running {
			peer = o.httpAddr
			break
		}
	}
	if peer == "" {
		return errors.New("rebuild: no live member")
	}
	args := []string{"rebuild", "-data-dir", n.dataDir, "-addr", peer}
	if tok := c.Token(); tok != "" {
		args = append(args, "-token", tok)
	}
	if c.tls != nil {
		args = append(args, c.tls.clientArgs()...)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(rctx, c.cfg.Bin, args...).CombinedOutput()
	c.cfg.Logf("rebuild: %s: keel %s: %s", n.id, strings.Join(args[:3], " "), strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("keel rebuild of %s: %v: %s", n.id, err, out)
	}
	if err := c.launch(n, false, nil); err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	return WaitVoters(wctx, c, c.Members())
}
