package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/rafttest"
	"github.com/keel-kv/keel/versions"
)

// TestLeaderRechecksForwardedWrites: a follower forwards a KV write with its caller's
// token, and the leader checks it again against its own ACL state. With the
// follower's own check bypassed (skipLocalTxnCheck), a token without the write right,
// and a write under keel's reserved prefix, are refused by the leader (ErrForbidden,
// raft.ErrCallerRefused) and nothing is written; a token with the right still writes
// through the follower.
func TestLeaderRechecksForwardedWrites(t *testing.T) {
	nodes := rafttest.Cluster(t, 3)
	lead, fol := -1, -1
	for i, n := range nodes {
		if n.IsLeader() {
			lead = i
		} else if fol < 0 {
			fol = i
		}
	}
	if lead < 0 {
		t.Fatal("no leader")
	}
	core := func(n *raft.Node) *Server {
		s, err := NewServer(DefaultConfig(), n, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	l, f := core(nodes[lead]), core(nodes[fol])
	f.skipLocalTxnCheck = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	boot, err := l.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root, err := l.Authenticate(ctx, boot.SecretID)
	if err != nil {
		t.Fatal(err)
	}
	tokenFor := func(name, access string) Caller {
		t.Helper()
		if _, err := l.ACLPolicyPut(ctx, root, name, api.ACLPolicy{Keys: []api.ACLKeyRule{{Prefix: "app/", Access: access}}}); err != nil {
			t.Fatal(err)
		}
		tok, err := l.ACLTokenCreate(ctx, root, api.ACLTokenRequest{Policies: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := f.Authenticate(ctx, tok.SecretID) // the follower reads the token at the leader
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ro, rw := tokenFor("ro", api.AccessRead), tokenFor("rw", api.AccessWrite)
	froot, err := f.Authenticate(ctx, boot.SecretID)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := f.Put(ctx, rw, "app/ok", []byte("v"), -1, 0); err != nil {
		t.Fatalf("a write with the right through the follower: %v", err)
	}
	put := func(k string) fsm.Op { return fsm.Op{Type: fsm.OpPut, Key: []byte(k), Value: []byte("v")} }
	refused := func(c Caller, txn *fsm.Txn) {
		t.Helper()
		_, err := f.Txn(ctx, c, txn, TxnOptions{})
		if !errors.Is(err, acl.ErrForbidden) && !errors.Is(err, raft.ErrCallerRefused) {
			t.Fatalf("forwarded txn %+v: %v, want refused by the leader (leader still n%d: %v)",
				txn, err, lead+1, nodes[lead].IsLeader())
		}
	}
	refused(ro, &fsm.Txn{Success: []fsm.Op{put("app/no")}})
	refused(rw, &fsm.Txn{Success: []fsm.Op{put("app/no"), {Type: fsm.OpGet, Key: []byte("other/x")}}})
	refused(rw, &fsm.Txn{Success: []fsm.Op{put("app/no")},
		Failure: []fsm.Op{{Type: fsm.OpDeleteRange, Key: []byte("a"), End: []byte("z")}}})
	refused(froot, &fsm.Txn{Success: []fsm.Op{put(versions.SystemPrefix + "forged")}})
	for _, k := range []string{"app/no", versions.SystemPrefix + "forged"} {
		if _, _, err := l.Get(ctx, Caller{}, k, 0, fsm.Linearizable); !errors.Is(err, fsm.ErrKeyNotFound) {
			t.Errorf("GET %q after the refused writes: %v, want not found", k, err)
		}
	}
	if nodes[fol].IsLeader() {
		t.Fatal("the follower took over: its writes were not forwarded")
	}
}
