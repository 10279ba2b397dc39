package etcdjudge

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A nested transaction runs the branch its own compares choose, its compares read the
// state before the outer transaction, its writes share the outer revision, and its
// answer is nested (kills: nested txns refused; a nested txn's branch or answer
// flattened into the outer one).
func TestNestedTxn(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	if _, err := c.Put(ctx, "/nest/k", "a"); err != nil {
		t.Fatal(err)
	}
	inner := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value("/nest/k"), "=", "b")},
		[]clientv3.Op{clientv3.OpPut("/nest/then", "x")},
		[]clientv3.Op{clientv3.OpPut("/nest/else", "y"), clientv3.OpGet("/nest/k")})
	resp, err := c.Txn(ctx).Then(clientv3.OpPut("/nest/k", "b"), inner).Commit()
	if err != nil || !resp.Succeeded || len(resp.Responses) != 2 {
		t.Fatalf("txn = %v, %v", resp, err)
	}
	nr := resp.Responses[1].GetResponseTxn()
	if nr == nil || nr.Succeeded || len(nr.Responses) != 2 {
		t.Fatalf("nested answer = %v; want the failure branch (its compare saw the value before the txn)", resp.Responses[1])
	}
	if kvs := nr.Responses[1].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "b" {
		t.Fatalf("nested get = %v, want the outer put's value", kvs)
	}
	get, err := c.Get(ctx, "/nest/", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 2 || string(get.Kvs[0].Key) != "/nest/else" ||
		get.Kvs[0].ModRevision != resp.Header.Revision || get.Kvs[1].ModRevision != resp.Header.Revision {
		t.Fatalf("after the txn = %v, %v; want /nest/else and /nest/k at revision %d", get, err, resp.Header.Revision)
	}
	dup := clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("/nest/k", "c")}, nil)
	if _, err := c.Txn(ctx).Then(clientv3.OpPut("/nest/k", "d"), dup).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("a key put in the txn and in a nested one: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
	reserved := clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("\x00keel/x", "v")}, nil)
	if _, err := c.Txn(ctx).Then(reserved).Commit(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a nested put of a reserved key: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
}

// LEASE compares and compares over a range (range_end, prefix, from key) hold only if
// they hold for every key of the range (kills: LEASE or range_end refused; a range
// compare reading only its first key).
func TestTxnLeaseAndRangeCompares(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/cmp/a", "1", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/cmp/b", "2"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmp  clientv3.Cmp
		want bool
	}{
		{"lease of a", clientv3.Compare(clientv3.LeaseValue("/cmp/a"), "=", lease.ID), true},
		{"lease of b", clientv3.Compare(clientv3.LeaseValue("/cmp/b"), "=", lease.ID), false},
		{"no lease on b", clientv3.Compare(clientv3.LeaseValue("/cmp/b"), "=", 0), true},
		{"prefix versions", clientv3.Compare(clientv3.Version("/cmp/"), "=", 1).WithPrefix(), true},
		{"prefix values", clientv3.Compare(clientv3.Value("/cmp/"), "=", "1").WithPrefix(), false},
		{"range [a, b)", clientv3.Compare(clientv3.Value("/cmp/a"), "=", "1").WithRange("/cmp/b"), true},
		{"prefix leases", clientv3.Compare(clientv3.LeaseValue("/cmp/"), ">", 0).WithPrefix(), false},
		{"empty range", clientv3.Compare(clientv3.Version("/cmp/x"), "=", 0).WithPrefix(), true},
	} {
		resp, err := c.Txn(ctx).If(tc.cmp).Commit()
		if err != nil || resp.Succeeded != tc.want {
			t.Errorf("%s: %v, %v; want succeeded %v", tc.name, resp, err, tc.want)
		}
	}
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version("\x00"), ">", 0).WithRange("\x00")).Commit(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a compare over keys keel hides: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
}

// Put with ignore_value keeps the value, with ignore_lease the lease; on an absent key
// both are etcd's "key not found"; a value or lease given with them is etcd's error
// (kills: ignore_* refused, or the value or lease overwritten).
func TestPutIgnoreValueLease(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	lease, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/ign/k", "v1", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/ign/k", "v2", clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/ign/k", "", clientv3.WithIgnoreValue()); err != nil {
		t.Fatal(err)
	}
	get, err := c.Get(ctx, "/ign/k")
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v2" || get.Kvs[0].Lease != 0 ||
		get.Kvs[0].Version != 3 {
		t.Fatalf("after ignore_lease then ignore_value = %v, %v; want v2, no lease, version 3", get, err)
	}
	if _, err := c.Put(ctx, "/ign/k", "v3", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/ign/k", "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	if get, err = c.Get(ctx, "/ign/k"); err != nil || string(get.Kvs[0].Value) != "v3" || get.Kvs[0].Lease != int64(lease.ID) {
		t.Fatalf("after both ignores = %v, %v; want v3 with the lease", get, err)
	}
	for name, opts := range map[string][]clientv3.OpOption{
		"ignore_value": {clientv3.WithIgnoreValue()}, "ignore_lease": {clientv3.WithIgnoreLease()},
	} {
		if _, err := c.Put(ctx, "/ign/none", "", opts...); !errors.Is(err, rpctypes.ErrKeyNotFound) {
			t.Errorf("%s on an absent key: %v, want %v", name, err, rpctypes.ErrKeyNotFound)
		}
	}
	if _, err := c.Put(ctx, "/ign/k", "x", clientv3.WithIgnoreValue()); !errors.Is(err, rpctypes.ErrValueProvided) {
		t.Fatalf("ignore_value with a value: %v, want %v", err, rpctypes.ErrValueProvided)
	}
	if _, err := c.Put(ctx, "/ign/k", "", clientv3.WithIgnoreLease(), clientv3.WithLease(lease.ID)); !errors.Is(err, rpctypes.ErrLeaseProvided) {
		t.Fatalf("ignore_lease with a lease: %v, want %v", err, rpctypes.ErrLeaseProvided)
	}
}
