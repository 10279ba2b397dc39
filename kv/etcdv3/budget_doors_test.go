package etcdv3_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// A client has one budget on a node, whatever door it comes through: its HTTP
// connections, its etcd connections and the streams on them count together against
// MaxConnsPerClient (kill: etcd streams not counted — the fourth stream is served and
// the HTTP connection after it too).
//
//	MaxConnsPerClient 6, one address (127.0.0.1)
//	HTTP: 2 connections held (2); etcd: 1 connection (3), 3 health Watches (6)
//	etcd: a 4th health Watch → ResourceExhausted; HTTP: a 3rd connection → 429
//	HTTP: one connection closed → a health Watch is served
func TestOneClientBudgetAcrossDoors(t *testing.T) {
	cfg := kv.DefaultConfig()
	cfg.MaxConnsPerClient = 6
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, e := httpapi.New(core), etcdv3.New(core)
	hln, eln := rt.Listen(t), rt.Listen(t)
	hdone, edone := make(chan error, 1), make(chan error, 1)
	go func() { hdone <- h.Serve(hln) }()
	go func() { edone <- e.Serve(core.LimitListener(eln)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
		h.Shutdown(ctx)
		<-edone
		<-hdone
	})
	healthz := func(c net.Conn) (int, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("GET " + api.PathHealth + " HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 2 {
		c, err := net.Dial("tcp", hln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if code, err := healthz(c); code != http.StatusOK {
			t.Fatalf("HTTP connection %d: %d %v, want 200", i, code, err)
		}
	}
	conn, err := grpc.NewClient(eln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	health := func() error {
		s, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	for i := range 3 {
		if err := health(); err != nil {
			t.Fatalf("health Watch %d: %v, want served", i, err)
		}
	}
	if err := health(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("health Watch over the budget: %v, want ResourceExhausted", err)
	}
	extra, err := net.Dial("tcp", hln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if code, _ := healthz(extra); code != http.StatusTooManyRequests {
		t.Fatalf("HTTP connection over the budget: %d, want 429", code)
	}
	held[0].Close()
	for range 50 { // the closed connection's slot comes back once the server sees it
		if err = health(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("health Watch once an HTTP connection closed: %v, want served", err)
}
