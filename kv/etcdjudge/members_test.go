package etcdjudge

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MemberRemove takes the member ID MemberList reports and removes that node from the
// Raft configuration (as DELETE /v1/agent/peers/ID), asked of any node; an unknown ID is etcd's member
// not found; MemberAdd and MemberPromote stay Unimplemented: a keel node joins by
// itself (keel agent -join) and keel promotes its non-voters (kills: MemberRemove
// Unimplemented; the ID not mapped to the node; an unknown ID removing nothing
// silently).
func TestMemberRemove(t *testing.T) {
	nodes := startCluster(t)
	c, err := nodes[1].client() // n1 bootstrapped and most often leads: the removal is forwarded
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	want := map[string]string{}
	for i, n := range nodes {
		want["n"+string(rune('1'+i))] = "http://" + n.etcdAddr
	}
	waitMembers(t, c, want)
	ml, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n3 uint64
	for _, m := range ml.Members {
		if m.Name == "n3" {
			n3 = m.ID
		}
	}
	if _, err := c.MemberRemove(ctx, n3^1); !errors.Is(err, rpctypes.ErrMemberNotFound) {
		t.Fatalf("remove an unknown member: %v, want %v", err, rpctypes.ErrMemberNotFound)
	}
	resp, err := c.MemberRemove(ctx, n3)
	if err != nil {
		t.Fatalf("remove n3: %v", err)
	}
	for _, m := range resp.Members {
		if m.ID == n3 {
			t.Fatalf("the answer still lists n3: %v", resp.Members)
		}
	}
	delete(want, "n3")
	waitMembers(t, c, want)
	if _, err := c.MemberAdd(ctx, []string{"http://127.0.0.1:1"}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("member add: %v, want Unimplemented", err)
	}
	if _, err := c.MemberPromote(ctx, n3); status.Code(err) != codes.Unimplemented {
		t.Fatalf("member promote: %v, want Unimplemented", err)
	}
}
