package etcdjudge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Each response of a transaction carries the header revision etcd gives it (mvcc
// storeTxnWrite): a put the transaction's revision, a range or a delete the revision
// it saw (the one before the transaction until something in it wrote, then the
// transaction's), a nested transaction's own header revision 0. A transaction that
// writes nothing answers the current revision everywhere (kills: no per-op header; the
// transaction's revision on every op; a delete of nothing counted as a write).
//
//	op                   wrote before?  header revision
//	get  /hdr/a          no             T-1
//	del  /hdr/absent     no             T-1
//	put  /hdr/a          -              T
//	get  /hdr/a          yes            T
//	del  /hdr/absent     yes            T
//	txn { get /hdr/a }   yes            0 { T }
func TestTxnOpHeaders(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	if _, err := c.Put(ctx, "/hdr/a", "0"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpGet("/hdr/a"), clientv3.OpDelete("/hdr/absent"), clientv3.OpPut("/hdr/a", "1"),
		clientv3.OpGet("/hdr/a"), clientv3.OpDelete("/hdr/absent"),
		clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpGet("/hdr/a")}, nil)).Commit()
	if err != nil {
		t.Fatal(err)
	}
	T := resp.Header.Revision
	nested := resp.Responses[5].GetResponseTxn()
	got := []int64{opRevision(resp.Responses[0]), opRevision(resp.Responses[1]), opRevision(resp.Responses[2]),
		opRevision(resp.Responses[3]), opRevision(resp.Responses[4]), nested.GetHeader().GetRevision(),
		opRevision(nested.Responses[0])}
	want := []int64{T - 1, T - 1, T, T, T, 0, T}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("#%d: header revision = %d, want %d (transaction revision %d)", i, got[i], want[i], T)
		}
	}
	ro, err := c.Txn(ctx).Then(clientv3.OpGet("/hdr/a"), clientv3.OpDelete("/hdr/absent")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if ro.Header.Revision != T || opRevision(ro.Responses[0]) != T || opRevision(ro.Responses[1]) != T {
		t.Errorf("a transaction writing nothing: header %d, ops %d and %d; want %d everywhere", ro.Header.Revision,
			opRevision(ro.Responses[0]), opRevision(ro.Responses[1]), T)
	}
}

// opRevision is the header revision of one response of a transaction.
func opRevision(r *etcdserverpb.ResponseOp) int64 {
	switch {
	case r.GetResponseRange() != nil:
		return r.GetResponseRange().GetHeader().GetRevision()
	case r.GetResponsePut() != nil:
		return r.GetResponsePut().GetHeader().GetRevision()
	case r.GetResponseDeleteRange() != nil:
		return r.GetResponseDeleteRange().GetHeader().GetRevision()
	}
	return -1
}

// A range inside a transaction reads at its revision (the state then, not the
// transaction's own writes); a compacted or future revision fails the whole
// transaction with etcd's error and writes nothing (kills: the revision refused;
// ignored, reading the latest state; the transaction applied despite a bad revision).
func TestTxnRangeAtRevision(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	old, err := c.Put(ctx, "/txnrev/k", "old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/txnrev/k", "new"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpPut("/txnrev/k", "newer"),
		clientv3.OpGet("/txnrev/", clientv3.WithPrefix(), clientv3.WithRev(old.Header.Revision))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	rr := resp.Responses[1].GetResponseRange()
	if len(rr.Kvs) != 1 || string(rr.Kvs[0].Value) != "old" || rr.Header.Revision != resp.Header.Revision {
		t.Fatalf("get at revision %d inside a txn = %v; want the value then (%q), header at the txn's revision %d",
			old.Header.Revision, rr, "old", resp.Header.Revision)
	}
	future := resp.Header.Revision + 1000
	_, err = c.Txn(ctx).Then(clientv3.OpPut("/txnrev/k", "never"), clientv3.OpGet("/txnrev/k", clientv3.WithRev(future))).Commit()
	if !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("a txn reading a future revision: %v, want %v", err, rpctypes.ErrFutureRev)
	}
	if g, err := c.Get(ctx, "/txnrev/k"); err != nil || strings.Compare(string(g.Kvs[0].Value), "newer") != 0 {
		t.Fatalf("after the refused txn: %v, %v; want nothing written", g, err)
	}
}

// Maintenance.Status measures the database: db_size is the bytes of the node's data
// directory on disk (its Raft log, stable store and snapshots), db_size_in_use the
// same (keel keeps no free pages), so both grow as data is written (kills: sizes left
// 0; a constant).
func TestStatusDBSize(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	before, err := c.Status(ctx, single.etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	if before.DbSize <= 0 || before.DbSizeInUse <= 0 || before.DbSizeInUse > before.DbSize {
		t.Fatalf("status db_size %d, db_size_in_use %d; want 0 < in use <= size", before.DbSize, before.DbSizeInUse)
	}
	value := strings.Repeat("x", 100_000)
	for i := range 20 {
		if _, err := c.Put(ctx, fmt.Sprint("/dbsize/", i), value); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c.Delete(context.Background(), "/dbsize/", clientv3.WithPrefix()) })
	after, err := c.Status(ctx, single.etcdAddr)
	if err != nil {
		t.Fatal(err)
	}
	// 2 MB of live keys: in the log, or in a snapshot if one was taken meanwhile.
	if after.DbSize < before.DbSize+1_000_000 {
		t.Fatalf("db_size %d -> %d after writing 2 MB; want it to grow by the bytes written", before.DbSize, after.DbSize)
	}
}
