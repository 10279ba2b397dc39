package etcdchaos

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/keel-kv/keel/chaos"
)

// cluster is a chaos.ProcCluster whose nodes serve the etcd door, with one etcd client
// per node.
type cluster struct {
	*chaos.ProcCluster
	etcd map[string]*clientv3.Client
}

var _ Nodes = (*cluster)(nil)

// startCluster starts cfg's processes with the etcd door on and an etcd client of each.
// intercept, when set, sits in front of every unary call of those clients (a door
// broken on purpose, for the checker's self-test).
func startCluster(ctx context.Context, cfg chaos.ProcConfig, intercept grpc.UnaryClientInterceptor) (*cluster, error) {
	cfg.Etcd = true
	pc, err := chaos.StartProcCluster(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{ProcCluster: pc, etcd: map[string]*clientv3.Client{}}
	for _, id := range pc.Members() {
		cl, err := newEtcdClient(pc.EtcdAddr(id), intercept)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcd client of %s: %w", id, err)
		}
		c.etcd[id] = cl
	}
	return c, nil
}

// newEtcdClient is an etcd client of one node. gRPC's reconnect backoff is capped at
// 1 s (its default grows to 2 minutes), so a client of a killed and restarted node
// comes back within a second of the restart, as the HTTP clients of chaos do.
func newEtcdClient(addr string, intercept grpc.UnaryClientInterceptor) (*clientv3.Client, error) {
	opts := []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: time.Second,
	})}
	if intercept != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(intercept))
	}
	return clientv3.New(clientv3.Config{
		Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: time.Second, DialOptions: opts,
	})
}

// Etcd implements Nodes.
func (c *cluster) Etcd(id string) *clientv3.Client { return c.etcd[id] }

// Close closes the clients and stops the cluster.
func (c *cluster) Close() {
	for _, cl := range c.etcd {
		cl.Close()
	}
	c.ProcCluster.Close()
}
