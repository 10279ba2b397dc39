package etcdv3_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv/api"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// TestStatusNeedsAToken: once ACLs are enforced, the node's status — its ID, release,
// leader, members and their Raft addresses — is for a caller with a valid token (any:
// etcd 3.7 asks Status and MemberList for an authenticated user, no role), on every
// door. A caller without one learns only how to authenticate: GET /v1/status answers
// the public view (TLS, the ACL state, restricted: true); etcd's Status, which has no
// such view, refuses as etcd does (user name is empty). A bad token is 401 (etcd:
// invalid auth token) on both.
// Liveness and readiness stay open. Kills: status answered whole without a token.
func TestStatusNeedsAToken(t *testing.T) {
	f := rt.New(t)
	d := newEtcdDoor(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node := f.Srv.NodeStatus()
	leaks := []string{node.NodeID, node.LeaderAddr, buildinfo.Version()}

	// HTTP, no token: the public view, none of the node's identity.
	code, body := f.HTTPDo(t, "", http.MethodGet, api.PathStatus, "")
	var st api.StatusResponse
	if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/status without a token: %d %s, want 200 with the public view", code, body)
	}
	if !st.Restricted || st.ACL == nil || !st.ACL.Bootstrapped || len(st.Members) != 0 || st.NodeID != "" ||
		st.LeaderID != "" || st.Release != "" || st.RaftAddr != "" {
		t.Errorf("GET /v1/status without a token = %s; want the public view only", body)
	}
	for _, s := range leaks {
		if s != "" && strings.Contains(string(body), s) {
			t.Errorf("GET /v1/status without a token tells %q: %s", s, body)
		}
	}
	// HTTP, any valid token (one lacking the members right): the whole status.
	code, body = f.HTTPDo(t, f.Lacking[rt.NeedMembers], http.MethodGet, api.PathStatus, "")
	st = api.StatusResponse{}
	if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil || st.Restricted ||
		st.NodeID != node.NodeID || len(st.Members) == 0 {
		t.Errorf("GET /v1/status with a token: %d %s, want the whole status", code, body)
	}
	if code, body := f.HTTPDo(t, "keel_not-a-token", http.MethodGet, api.PathStatus, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/status with a bad token: %d %s, want 401", code, body)
	}
	for _, p := range []string{api.PathHealth, api.PathReady} {
		if code, body := f.HTTPDo(t, "", http.MethodGet, p, ""); code != http.StatusOK {
			t.Errorf("%s without a token: %d %s, want 200", p, code, body)
		}
	}

	// etcd, no token: refused as etcd 3.7 refuses it (user name is empty).
	if _, err := d.maint.Status(ctx, &pb.StatusRequest{}); !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
		t.Errorf("etcd Status without a token: %v, want %v", err, rpctypes.ErrGRPCUserEmpty)
	}
	if _, err := d.cluster.MemberList(ctx, &pb.MemberListRequest{}); !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
		t.Errorf("etcd MemberList without a token: %v, want %v", err, rpctypes.ErrGRPCUserEmpty)
	}
	bad := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, "keel_not-a-token")
	if _, err := d.maint.Status(bad, &pb.StatusRequest{}); !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
		t.Errorf("etcd Status with a bad token: %v, want %v", err, rpctypes.ErrGRPCInvalidAuthToken)
	}
	// etcd, any valid token: the whole status.
	tok := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, f.Lacking[rt.NeedMembers])
	if r, err := d.maint.Status(tok, &pb.StatusRequest{}); err != nil || r.Leader == 0 || r.RaftTerm == 0 {
		t.Errorf("etcd Status with a token: %+v, %v; want the whole status", r, err)
	}
}
