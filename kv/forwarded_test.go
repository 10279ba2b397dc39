package kv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/rafttest"
	"github.com/keel-kv/keel/versions"
)

// serveNode starts a kv server over a real raft node.
func serveNode(t *testing.T, n *raft.Node) *testServer {
	t.Helper()
	srv, err := NewServer(DefaultConfig(), n, nil)
	if err != nil {
		t.Fatal(err)
	}
	attachTestDoors(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testServer{t: t, srv: srv, url: hs.URL}
}

// TestLeaderRechecksForwardedWrites: a follower forwards a KV API write with its
// caller's token, and the leader checks it again against its own ACL state. With the
// follower's own check bypassed (skipLocalTxnCheck), a token without the write right,
// and a write under keel's reserved prefix, are refused by the leader with 403 and
// nothing is written; a token with the right still writes through the follower.
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
	l := serveNode(t, nodes[lead])
	f := serveNode(t, nodes[fol])
	f.srv.skipLocalTxnCheck = true
	var tok api.ACLToken
	l.doJSON(http.MethodPost, api.PathACLBootstrap, nil, http.StatusOK, &tok)
	la := &aclServer{testServer: l, root: tok.SecretID}
	fa := &aclServer{testServer: f, root: tok.SecretID}
	ro := la.tokenFor("ro", "app/", api.AccessRead)
	rw := la.tokenFor("rw", "app/", api.AccessWrite)

	fa.mustAs(rw, http.MethodPut, api.PathKV+"app/ok", []byte("v"), http.StatusOK, nil)
	put := func(k string) api.Op { return api.Op{Type: api.OpPut, Key: k, Value: []byte("v")} }
	// POST /v1/txn: the PUT route checks the key before reading the body, the
	// transaction route only in applyTxn.
	refused := func(secret string, txn api.TxnRequest) {
		t.Helper()
		code, b := fa.doAs(secret, http.MethodPost, api.PathTxn, mustJSON(txn))
		var e api.Error
		json.Unmarshal(b, &e)
		if code != http.StatusForbidden || e.Reason != api.ReasonForbidden {
			t.Fatalf("forwarded txn %+v = %d %s, want 403 %s from the leader (leader still n%d: %v)",
				txn, code, b, api.ReasonForbidden, lead+1, nodes[lead].IsLeader())
		}
	}
	refused(ro, api.TxnRequest{Success: []api.Op{put("app/no")}})
	refused(rw, api.TxnRequest{Success: []api.Op{put("app/no"), {Type: api.OpGet, Key: "other/x"}}})
	refused(rw, api.TxnRequest{Success: []api.Op{put("app/no")}, Failure: []api.Op{{Type: api.OpDeleteRange, Key: "a", End: "z"}}})
	refused(la.root, api.TxnRequest{Success: []api.Op{put(versions.SystemPrefix + "forged")}})
	for _, k := range []string{"app/no", versions.SystemPrefix + "forged"} {
		la.mustAs(la.root, http.MethodGet, api.PathKV+url.PathEscape(k), nil, http.StatusNotFound, nil)
	}
	if nodes[fol].IsLeader() {
		t.Fatal("the follower took over: its writes were not forwarded")
	}
}
