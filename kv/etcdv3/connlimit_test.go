package etcdv3_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// The etcd port shares the node's connection bounds with the HTTP port
// (kv.Server.LimitListener): with MaxConnsPerClient 2, a third connection from one
// address is refused and closed, on the etcd port as on HTTP.
func TestEtcdPortConnectionsPerClientBounded(t *testing.T) {
	cfg := kv.DefaultConfig()
	cfg.MaxConnsPerClient = 2
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := etcdv3.New(core)
	ln := rt.Listen(t)
	done := make(chan error, 1)
	go func() { done <- e.Serve(core.LimitListener(ln)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
		<-done
	})
	var kept []net.Conn
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted and counted
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(third)
	if err != nil || !strings.Contains(string(b), "429") {
		t.Fatalf("third connection from one address: read %q, %v; want a 429 refusal and close", b, err)
	}
	// The two within the bound stay open: the server sends its HTTP/2 settings and
	// waits for the client's preface.
	kept[0].SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	got, err := io.ReadAll(kept[0])
	if !isTimeout(err) || strings.Contains(string(got), "429") {
		t.Fatalf("a connection within the bound: read %q, %v; want it served and kept open", got, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
