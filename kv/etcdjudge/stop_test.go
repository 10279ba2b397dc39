package etcdjudge

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// A node stops promptly while etcd clients hold keepalive and watch streams open:
// the door ends them rather than waiting for the clients (kills: a keepalive stream
// blocked in Recv holding the graceful stop until -shutdown-timeout).
func TestStopWithOpenStreams(t *testing.T) {
	n, err := startNode(filepath.Join(t.TempDir(), "stop"), "-dev", "-shutdown-timeout", "30s")
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	c, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Orphan()
	wch := c.Watch(testCtx(t), "/stop/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if wr := next(t, wch); !wr.Created {
		t.Fatalf("first watch answer = %+v", wr)
	}
	start := time.Now()
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop within 20 s with streams open")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("stopping took %v with streams open", d)
	}
}
