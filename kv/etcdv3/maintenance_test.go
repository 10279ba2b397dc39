package etcdv3

import (
	"context"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// HashKV of a store never compacted answers compact revision -1, as etcd's mvcc does
// (compactMainRev starts at -1); found by the etcdctl judge (endpoint hashkv -w json).
// Kill: the store's 0 answered as is.
func TestHashKVNeverCompactedAsEtcd(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := etcdMaintenance{e: &Server{core: core}}.HashKV(context.Background(), &pb.HashKVRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.CompactRevision != -1 {
		t.Errorf("compact revision = %d, want -1", resp.CompactRevision)
	}
}
