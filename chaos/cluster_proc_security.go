package chaos

// How the process backend runs releases with and without the security flags, and
// bootstraps ACLs.

import (
	"context"
	"os/exec"
	"strings"
	"sync"
)

// securityArgs are the flags a node's binary needs to run the harness's plain-text
// cluster: -insecure, for a release that refuses plain text outside -dev (it lists the
// flag); none for an older release (the upgrade test's), which would refuse the flag.
func securityArgs(bin string) []string {
	if agentHasFlag(bin, "insecure") {
		return []string{"-insecure"}
	}
	return nil
}

var agentFlags sync.Map // binary path -> the output of `agent --help`

// agentHasFlag reports whether `bin agent --help` lists -name.
func agentHasFlag(bin, name string) bool {
	help, ok := agentFlags.Load(bin)
	if !ok {
		out, _ := exec.Command(bin, "agent", "--help").CombinedOutput()
		help, _ = agentFlags.LoadOrStore(bin, string(out))
	}
	return strings.Contains(help.(string), "--"+name+" ")
}

// bootstrapACL bootstraps the ACL system through the first node when cfg.ACL is set
// and the binary has ACLs, keeps the management token, and gives the node a client
// that sends it.
func (c *ProcCluster) bootstrapACL(ctx context.Context, n *procNode) error {
	if !c.cfg.ACL || aclArgs(c.cfg.Bin) == nil {
		return nil
	}
	tok, err := aclBootstrap(ctx, n.httpAddr)
	if err != nil {
		return err
	}
	nc := newNodeClient(n.httpAddr, tok.SecretID)
	c.mu.Lock()
	c.mu.token, n.cl = tok.SecretID, nc
	c.mu.Unlock()
	c.cfg.Logf("acl: bootstrapped (token accessor %s); every harness client sends it", tok.AccessorID)
	return nil
}

// Token is the ACL management token the harness uses ("" without ACLs).
func (c *ProcCluster) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.token
}
