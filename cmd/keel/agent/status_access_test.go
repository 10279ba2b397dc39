package agent

import (
	"context"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/client"
)

// TestStatusForNodeCertificate: on a TLS cluster with -acl-default deny, not
// bootstrapped (no token exists yet), a node certificate of the cluster CA reads the
// whole status — what a joining agent does to learn a member's Raft address from its
// HTTP address (resolveJoin) — while a client certificate without a token gets the
// public view. Kills: the status rule ignoring node certificates (joins by HTTP address
// break on a deny cluster), or admitting any certificate.
func TestStatusForNodeCertificate(t *testing.T) {
	c, ca, _ := newTLSTestCluster(t, 1, func(cfg *Config) { cfg.KV.ACLDefault = kv.ACLDeny })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := c.agents[0]
	ask := func(files string) (string, bool) {
		f := ca.Client(t, files)
		if files == "n9" {
			f = ca.Node(t, files)
		}
		cl, err := client.New([]string{a.HTTPAddr()}, client.Options{MaxRetries: -1, TLS: tlstest.Reloader(t, f).ClientConfig()})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatalf("status with the certificate of %s: %v", files, err)
		}
		return st.RaftAddr, st.Restricted
	}
	if raft, restricted := ask("n9"); restricted || raft != a.RaftAddr() {
		t.Errorf("status with a node certificate: raft_addr %q restricted %v, want %s, the whole status", raft, restricted, a.RaftAddr())
	}
	if got := raftAddrOf(ctx, a.HTTPAddr(), tlstest.Reloader(t, ca.Node(t, "n8")).ClientConfig()); got != a.RaftAddr() {
		t.Errorf("a joining node resolves the HTTP address to %q, want %s", got, a.RaftAddr())
	}
	if raft, restricted := ask("tester"); !restricted || raft != "" {
		t.Errorf("status with a client certificate and no token: raft_addr %q restricted %v, want the public view", raft, restricted)
	}
}
