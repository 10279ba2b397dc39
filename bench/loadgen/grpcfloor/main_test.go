package main

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keel-kv/keel/internal/freeport"
)

// TestFloorAnswersTheLoadGenerator: what compare.sh's etcd driver asks of a member —
// Status with a leader, a Get that finds its key, a Put and a batch Txn — the floor
// answers.
func TestFloorAnswersTheLoadGenerator(t *testing.T) {
	ln, err := net.Listen("tcp", freeport.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s := newServer()
	go s.Serve(ln)
	defer s.Stop()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ln.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, ln.Addr().String())
	if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
		t.Fatalf("status = %+v, %v: want this member as leader", st, err)
	}
	resp, err := c.Get(ctx, "k42", clientv3.WithSerializable())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "k42" || len(resp.Kvs[0].Value) != 256 {
		t.Fatalf("get = %+v, %v: want k42 with a 256-byte value", resp, err)
	}
	if _, err := c.Put(ctx, "k42", "v"); err != nil {
		t.Fatal(err)
	}
	tr, err := c.Txn(ctx).Then(clientv3.OpPut("a", "1"), clientv3.OpPut("b", "2")).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn = %+v, %v", tr, err)
	}
}
