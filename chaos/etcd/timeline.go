package etcdchaos

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	states := make([]map[string]api.KV, to+1)
	var mu sync.Mutex
	var firstErr error
	compactedBelow := int64(0)
	revs := make(chan int64)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range revs {
				m, err := keyspaceAt(ctx, cl, r)
				mu.Lock()
				switch {
				case errors.Is(err, rpctypes.ErrCompacted):
					compactedBelow = max(compactedBelow, r)
				case err != nil && firstErr == nil:
					firstErr = fmt.Errorf("range at revision %d: %w", r, err)
				case err == nil:
					states[r] = m
				}
				mu.Unlock()
			}
		}()
	}
	for r := int64(1); r <= to && ctx.Err() == nil; r++ {
		revs <- r
	}
	close(revs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return chaos.DiffStates(states, compactedBelow+1, to), nil
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
