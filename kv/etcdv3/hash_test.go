package etcdv3_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"

	"github.com/keel-kv/keel/kv/api"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// Maintenance.Hash (python-etcd3's hash()) digests the node's state as HashKV does at
// the latest revision, moves with a write, and needs HashKV's right (the snapshot
// right; etcd: root for both).
func TestEtcdHashAsHashKV(t *testing.T) {
	f := rt.New(t)
	d := newEtcdDoor(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgmt := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, f.Mgmt)
	hash := func() (uint32, uint32) {
		t.Helper()
		h, err := d.maint.Hash(mgmt, &pb.HashRequest{})
		if err != nil {
			t.Fatalf("Hash: %v", err)
		}
		kv, err := d.maint.HashKV(mgmt, &pb.HashKVRequest{})
		if err != nil {
			t.Fatalf("HashKV: %v", err)
		}
		return h.Hash, kv.Hash
	}
	before, beforeKV := hash()
	if before != beforeKV {
		t.Errorf("Hash %d, HashKV %d at the same revision: want one digest", before, beforeKV)
	}
	f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathKV+"hash-moves", "v", nil)
	if after, _ := hash(); after == before {
		t.Errorf("Hash %d did not change with a write", after)
	}
	narrow := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, f.Lacking[rt.NeedSnapshot])
	if _, err := d.maint.Hash(narrow, &pb.HashRequest{}); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
		t.Errorf("Hash without the snapshot right: %v, want permission denied", err)
	}
}
