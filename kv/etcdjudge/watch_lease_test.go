package etcdjudge

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// next returns the next watch answer, failing after 10 s.
func next(t *testing.T, wch clientv3.WatchChan) clientv3.WatchResponse {
	t.Helper()
	select {
	case wr, ok := <-wch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return wr
	case <-time.After(10 * time.Second):
		t.Fatal("no watch answer within 10 s")
	}
	return clientv3.WatchResponse{}
}

func TestWatchFromRevisionWithPrevKV(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	first, err := c.Put(ctx, "/watch/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/watch/a", "2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, "/watch/a"); err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "/watch/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision), clientv3.WithPrevKV())
	var evs []*clientv3.Event
	for len(evs) < 3 {
		evs = append(evs, next(t, wch).Events...)
	}
	if evs[0].Type != mvccpb.PUT || string(evs[0].Kv.Value) != "1" || evs[0].PrevKv != nil ||
		evs[1].Type != mvccpb.PUT || string(evs[1].PrevKv.Value) != "1" ||
		evs[2].Type != mvccpb.DELETE || evs[2].PrevKv == nil || string(evs[2].PrevKv.Value) != "2" {
		t.Fatalf("events = %v", evs)
	}
	// A live event after the replay, and NOPUT filtering on a second watch of the stream.
	nodel := c.Watch(ctx, "/watch/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	if _, err := c.Put(ctx, "/watch/b", "3"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, "/watch/b"); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, wch).Events[0]; ev.Type != mvccpb.PUT || string(ev.Kv.Key) != "/watch/b" {
		t.Fatalf("live event = %v", ev)
	}
	if ev := next(t, nodel).Events[0]; ev.Type != mvccpb.DELETE {
		t.Fatalf("a NOPUT watch saw %v first", ev)
	}
}

func TestWatchProgressAndCancel(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	put, err := c.Put(ctx, "/progress/k", "1")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wch := c.Watch(clientv3.WithRequireLeader(wctx), "/progress/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := next(t, wch); !wr.Created {
		t.Fatalf("first answer = %+v, want created", wr)
	}
	// clientv3 keys its watch streams by the context's metadata: the request goes to
	// the watch's stream only with the same (require-leader) metadata.
	if err := c.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
		t.Fatal(err)
	}
	wr := next(t, wch)
	if !wr.IsProgressNotify() || wr.Header.Revision < put.Header.Revision {
		t.Fatalf("progress answer = %+v, want a progress notification at >= %d", wr, put.Header.Revision)
	}
	cancel()
	select {
	case _, ok := <-wch:
		for ok {
			_, ok = <-wch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a canceled watch's channel stayed open")
	}
}

func TestLease(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	g, err := c.Grant(ctx, 30)
	if err != nil || g.ID == 0 || g.TTL != 30 {
		t.Fatalf("grant = %v, %v", g, err)
	}
	if _, err := c.Put(ctx, "/lease/k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	ka, err := c.KeepAliveOnce(ctx, g.ID)
	if err != nil || ka.TTL < 29 {
		t.Fatalf("keepalive = %v, %v", ka, err)
	}
	ttl, err := c.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 30 || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "/lease/k" {
		t.Fatalf("time to live = %v, %v", ttl, err)
	}
	leases, err := c.Leases(ctx)
	if err != nil || !hasLease(leases.Leases, g.ID) {
		t.Fatalf("leases = %v, %v", leases, err)
	}
	if _, err := c.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if get, err := c.Get(ctx, "/lease/k"); err != nil || len(get.Kvs) != 0 {
		t.Fatalf("the revoked lease's key = %v, %v", get, err)
	}
	if gone, err := c.TimeToLive(ctx, g.ID); err != nil || gone.TTL != -1 {
		t.Fatalf("time to live of a revoked lease = %v, %v; want TTL -1", gone, err)
	}
	if _, err := c.Revoke(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("revoke twice: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
	if _, err := c.Put(ctx, "/lease/k", "v", clientv3.WithLease(g.ID)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with a revoked lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
	}
}

func hasLease(ls []clientv3.LeaseStatus, id clientv3.LeaseID) bool {
	for _, l := range ls {
		if l.ID == id {
			return true
		}
	}
	return false
}

// A key attached to a lease that is not kept alive goes when the lease expires.
func TestLeaseExpires(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	g, err := c.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	put, err := c.Put(ctx, "/expire/k", "v", clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "/expire/k", clientv3.WithRev(put.Header.Revision+1))
	if ev := next(t, wch).Events[0]; ev.Type != mvccpb.DELETE {
		t.Fatalf("event = %v, want the expiry's delete", ev)
	}
	if ka, err := c.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keepalive of an expired lease = %v, %v; want %v", ka, err, rpctypes.ErrLeaseNotFound)
	}
}

func TestHealthServing(t *testing.T) {
	conn, err := grpc.NewClient(single.etcdAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
}
