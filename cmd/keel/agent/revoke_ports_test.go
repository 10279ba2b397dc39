package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv/client"
)

// TestRemovedNodeCertRefusedOnClientPorts: one revocation list, every port. In a
// 3-node TLS cluster serving HTTP, the stream protocol and the etcd API, a follower's
// node certificate works as a client certificate on the other nodes; once the leader
// removes the follower (keel remove-peer, which records the revocation in the
// replicated list), that certificate is refused on the HTTP, stream and etcd ports of
// every remaining node — on connections opened before the removal too — while a client
// certificate still works. Kills: the replicated list checked on the Raft port only.
func TestRemovedNodeCertRefusedOnClientPorts(t *testing.T) {
	c, ca, files := newTLSTestCluster(t, 3, func(cfg *Config) { cfg.EtcdAddr = freeAddr(t) })
	li := c.leader()
	victim := (li + 1) % 3
	victimID := c.agents[victim].NodeID()
	victimTLS := tlstest.Reloader(t, files[victimID]).ClientConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type door struct {
		name string
		call func(ctx context.Context) error
	}
	var doors []door
	for i, a := range c.agents {
		if i == victim {
			continue
		}
		httpc, err := client.New([]string{a.HTTPAddr()}, client.Options{MaxRetries: -1, TLS: victimTLS})
		if err != nil {
			t.Fatal(err)
		}
		streamc, err := client.New([]string{a.HTTPAddr()}, client.Options{MaxRetries: -1, TLS: victimTLS, Stream: true})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(a.EtcdAddr(), grpc.WithTransportCredentials(credentials.NewTLS(victimTLS)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { httpc.Close(); streamc.Close(); conn.Close() })
		etcd := pb.NewKVClient(conn)
		doors = append(doors,
			door{fmt.Sprintf("HTTP of %s", a.NodeID()), func(ctx context.Context) error {
				_, err := httpc.Put(ctx, "from-"+victimID, []byte("x"))
				return err
			}},
			door{fmt.Sprintf("stream of %s", a.NodeID()), func(ctx context.Context) error {
				_, err := streamc.Put(ctx, "from-"+victimID, []byte("x"))
				return err
			}},
			door{fmt.Sprintf("etcd of %s", a.NodeID()), func(ctx context.Context) error {
				_, err := etcd.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
				return err
			}})
	}
	for _, d := range doors {
		if err := d.call(ctx); err != nil {
			t.Fatalf("%s with %s's node certificate before its removal: %v, want served", d.name, victimID, err)
		}
	}
	if err := c.agents[li].Node().RetireServer(ctx, victimID); err != nil {
		t.Fatalf("remove %s: %v", victimID, err)
	}
	for _, d := range doors {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			err = d.call(cctx)
			ccancel()
			if err != nil {
				break
			}
		}
		switch {
		case err == nil:
			t.Errorf("%s still serves removed %s's node certificate", d.name, victimID)
		case !client.IsUnauthorized(err) && !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken):
			t.Errorf("%s with removed %s's certificate: %v, want refused as unauthenticated", d.name, victimID, err)
		}
	}
	// A client certificate of the same CA is not touched by the node's revocation.
	tester, err := client.New([]string{c.agents[li].HTTPAddr()}, client.Options{MaxRetries: -1,
		TLS: tlstest.Reloader(t, ca.Client(t, "tester")).ClientConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer tester.Close()
	if _, err := tester.Put(ctx, "after", []byte("ok")); err != nil {
		t.Errorf("a client certificate after the removal: %v, want served", err)
	}
}
