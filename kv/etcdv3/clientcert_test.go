package etcdv3_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// The client-certificate rule is the core's (kv.Server.CheckClientCert), for every
// door: on the etcd port of a node that requires client certificates, a call without
// one is refused as etcd refuses an unauthenticated call (codes.Unauthenticated,
// etcd's invalid auth token), a call with one of the cluster CA is served, and gRPC
// health answers without one (load balancers), as /healthz does on HTTP.
func TestEtcdDoorRequiresClientCert(t *testing.T) {
	ca := tlstest.NewCA(t)
	cfg := kv.DefaultConfig()
	cfg.TLS = tlstest.Reloader(t, ca.Node(t, "n1")).HTTPServerConfig(true)
	cfg.RequireClientCert = true
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := etcdv3.New(core)
	ln := rt.Listen(t)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
		<-done
	})
	dial := func(t *testing.T, f *tlstest.CA, withCert bool) *grpc.ClientConn {
		t.Helper()
		files := f.CAOnly()
		if withCert {
			files = f.Client(t, "tester")
		}
		creds := credentials.NewTLS(tlstest.Reloader(t, files).ClientConfig())
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	range1 := &pb.RangeRequest{Key: []byte("k")}

	bare := dial(t, ca, false)
	_, err = pb.NewKVClient(bare).Range(ctx, range1)
	if !errors.Is(rpctypes.Error(err), rpctypes.ErrInvalidAuthToken) {
		t.Errorf("range without a client certificate: %v, want %v", err, rpctypes.ErrGRPCInvalidAuthToken)
	}
	if _, err := healthpb.NewHealthClient(bare).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without a client certificate: %v, want served", err)
	}
	if _, err := pb.NewKVClient(dial(t, ca, true)).Range(ctx, range1); err != nil {
		t.Errorf("range with a client certificate of the cluster CA: %v, want served", err)
	}
}
