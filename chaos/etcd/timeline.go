package etcdchaos

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/chaos"
	"github.com/keel-kv/keel/kv/api"
)

// ReadTimeline reads the store's MVCC history through the etcd door: the whole
// keyspace an etcd client sees, at every revision in [1, to] (a Range from "\x00" with
// that revision), diffed into what each revision wrote (chaos.DiffStates). Revisions
// the door says are compacted are skipped (From says where the history starts).
func ReadTimeline(ctx context.Context, cl *clientv3.Client, to int64) (*chaos.Timeline, error) {
	return chaos.ReadTimelineWith(ctx, to, func(ctx context.Context, r int64) (map[string]api.KV, error) {
		return keyspaceAt(ctx, cl, r)
	}, func(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) })
}

// keyspaceAt is every key an etcd client sees at revision rev.
func keyspaceAt(ctx context.Context, cl *clientv3.Client, rev int64) (map[string]api.KV, error) {
	resp, err := cl.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	if resp.More {
		return nil, fmt.Errorf("%w: unlimited range at revision %d says more", errBadAnswer, rev)
	}
	m := make(map[string]api.KV, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = api.KV{Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision}
	}
	return m, nil
}

// ReadNodeStates waits until every member has the same applied index and revision
// (chaos.Converge; traffic has stopped) and lists each member's keyspace at that
// revision through its own etcd door, serializable: what each node holds locally.
func ReadNodeStates(ctx context.Context, c *cluster) ([]chaos.NodeState, error) {
	rev, err := chaos.Converge(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []chaos.NodeState
	for _, id := range c.Members() {
		resp, err := c.Etcd(id).Get(ctx, "", clientv3.WithFromKey(), clientv3.WithRev(rev), clientv3.WithSerializable())
		if err != nil {
			return out, fmt.Errorf("keyspace of %s at revision %d: %w", id, rev, err)
		}
		s := chaos.NodeState{Node: id, Revision: rev}
		for _, kv := range resp.Kvs {
			s.KVs = append(s.KVs, api.KV{Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision,
				ModRevision: kv.ModRevision, Version: kv.Version})
		}
		out = append(out, s)
	}
	return out, nil
}
