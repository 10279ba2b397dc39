package etcdjudge

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A fresh store answers a revision above 0: kube-apiserver refuses a current
// revision of 0.
func TestFreshRevisionIsPositive(t *testing.T) {
	if firstRevision < 1 {
		t.Fatalf("a fresh keel answered revision %d; etcd clients (kube-apiserver) need > 0", firstRevision)
	}
}

func TestPutGetPrefixLimitRevision(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	var revs []int64
	for i := range 5 {
		resp, err := c.Put(ctx, fmt.Sprintf("/kv/a/%d", i), fmt.Sprint("v", i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("revisions do not increase: %v", revs)
		}
	}
	get, err := c.Get(ctx, "/kv/a/2")
	if err != nil || len(get.Kvs) != 1 || string(get.Kvs[0].Value) != "v2" || get.Kvs[0].ModRevision != revs[2] ||
		get.Kvs[0].Version != 1 || get.Kvs[0].CreateRevision != revs[2] {
		t.Fatalf("get /kv/a/2 = %v, %v", get, err)
	}
	all, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix())
	if err != nil || len(all.Kvs) != 5 || all.Count != 5 || all.More {
		t.Fatalf("prefix get = %d kvs, count %d, more %v, %v", len(all.Kvs), all.Count, all.More, err)
	}
	page, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithLimit(2))
	if err != nil || len(page.Kvs) != 2 || page.Count != 5 || !page.More || string(page.Kvs[1].Key) != "/kv/a/1" {
		t.Fatalf("limit 2 = %v, %v", page, err)
	}
	old, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithRev(revs[1]))
	if err != nil || len(old.Kvs) != 2 {
		t.Fatalf("get at revision %d = %v, %v; want 2 keys", revs[1], old, err)
	}
	keys, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(keys.Kvs) != 5 || len(keys.Kvs[0].Value) != 0 {
		t.Fatalf("keys only = %v, %v", keys, err)
	}
	count, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || count.Count != 5 || len(count.Kvs) != 0 {
		t.Fatalf("count only = %v, %v", count, err)
	}
	from, err := c.Get(ctx, "/kv/a/3", clientv3.WithFromKey(), clientv3.WithLimit(100))
	if err != nil || len(from.Kvs) < 2 || string(from.Kvs[0].Key) != "/kv/a/3" {
		t.Fatalf("from key = %v, %v", from, err)
	}
	desc, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(1))
	if err != nil || len(desc.Kvs) != 1 || string(desc.Kvs[0].Key) != "/kv/a/4" {
		t.Fatalf("newest by create revision = %v, %v", desc, err)
	}
	filtered, err := c.Get(ctx, "/kv/a/", clientv3.WithPrefix(), clientv3.WithMaxCreateRev(revs[1]))
	if err != nil || len(filtered.Kvs) != 2 {
		t.Fatalf("max create revision %d = %v, %v", revs[1], filtered, err)
	}
	if _, err := c.Get(ctx, "/kv/a/", clientv3.WithRev(revs[4]+1_000_000)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get at a future revision: %v, want %v", err, rpctypes.ErrFutureRev)
	}
}

func TestPutPrevKVAndDeletePrefixPrevKV(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	if _, err := c.Put(ctx, "/del/x", "1"); err != nil {
		t.Fatal(err)
	}
	put, err := c.Put(ctx, "/del/x", "2", clientv3.WithPrevKV())
	if err != nil || put.PrevKv == nil || string(put.PrevKv.Value) != "1" {
		t.Fatalf("put with prev kv = %v, %v", put, err)
	}
	if _, err := c.Put(ctx, "/del/y", "3"); err != nil {
		t.Fatal(err)
	}
	del, err := c.Delete(ctx, "/del/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil || del.Deleted != 2 || len(del.PrevKvs) != 2 || string(del.PrevKvs[0].Value) != "2" ||
		string(del.PrevKvs[1].Value) != "3" {
		t.Fatalf("delete prefix with prev kv = %v, %v", del, err)
	}
	one, err := c.Delete(ctx, "/del/x", clientv3.WithPrevKV())
	if err != nil || one.Deleted != 0 || len(one.PrevKvs) != 0 {
		t.Fatalf("delete of a deleted key = %v, %v", one, err)
	}
	get, err := c.Get(ctx, "/del/", clientv3.WithPrefix())
	if err != nil || len(get.Kvs) != 0 {
		t.Fatalf("after delete = %v, %v", get, err)
	}
}

func TestTxn(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	put, err := c.Put(ctx, "/txn/k", "a")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Txn(ctx).If(
		clientv3.Compare(clientv3.Value("/txn/k"), "=", "a"),
		clientv3.Compare(clientv3.Version("/txn/k"), "=", 1),
		clientv3.Compare(clientv3.CreateRevision("/txn/k"), "=", put.Header.Revision),
		clientv3.Compare(clientv3.ModRevision("/txn/k"), "<", put.Header.Revision+1),
	).Then(clientv3.OpPut("/txn/k", "b", clientv3.WithPrevKV()), clientv3.OpGet("/txn/k"),
		clientv3.OpDelete("/txn/none", clientv3.WithPrevKV())).
		Else(clientv3.OpGet("/txn/k")).Commit()
	if err != nil || !resp.Succeeded || len(resp.Responses) != 3 {
		t.Fatalf("txn = %v, %v", resp, err)
	}
	if pv := resp.Responses[0].GetResponsePut().PrevKv; pv == nil || string(pv.Value) != "a" {
		t.Fatalf("txn put prev kv = %v", pv)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "b" {
		t.Fatalf("txn get after put = %v", kvs)
	}
	failed, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Value("/txn/k"), "=", "a")).
		Then(clientv3.OpPut("/txn/k", "c")).Else(clientv3.OpGet("/txn/k")).Commit()
	if err != nil || failed.Succeeded || string(failed.Responses[0].GetResponseRange().Kvs[0].Value) != "b" {
		t.Fatalf("failing txn = %v, %v", failed, err)
	}
	if _, err := c.Txn(ctx).Then(clientv3.OpPut("/txn/d", "1"), clientv3.OpPut("/txn/d", "2")).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("duplicate key: %v, want %v", err, rpctypes.ErrDuplicateKey)
	}
}

// A ranged delete with prev_kv is one op of keel's transaction (fsm.Op.PrevKV): the
// answers of the ops after it line up.
func TestTxnDeletePrefixPrevKVThenOps(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	for _, k := range []string{"/txnd/a", "/txnd/b"} {
		if _, err := c.Put(ctx, k, k); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Txn(ctx).Then(clientv3.OpDelete("/txnd/", clientv3.WithPrefix(), clientv3.WithPrevKV()),
		clientv3.OpPut("/txnz/k", "v", clientv3.WithPrevKV()), clientv3.OpGet("/txnz/k")).Commit()
	if err != nil || len(resp.Responses) != 3 {
		t.Fatalf("txn = %v, %v", resp, err)
	}
	del := resp.Responses[0].GetResponseDeleteRange()
	if del == nil || del.Deleted != 2 || len(del.PrevKvs) != 2 || string(del.PrevKvs[1].Value) != "/txnd/b" {
		t.Fatalf("ranged delete in a txn = %v", resp.Responses[0])
	}
	if resp.Responses[1].GetResponsePut() == nil {
		t.Fatalf("second answer = %v, want the put's", resp.Responses[1])
	}
	if rr := resp.Responses[2].GetResponseRange(); rr == nil || len(rr.Kvs) != 1 || string(rr.Kvs[0].Value) != "v" {
		t.Fatalf("third answer = %v, want the get of the put key", resp.Responses[2])
	}
}

// keel's own records (under "\x00keel/") are neither visible nor writable; a delete
// over them and other keys deletes the others.
func TestReservedKeysInvisible(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	all, err := c.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		if strings.HasPrefix(string(kv.Key), "\x00keel/") {
			t.Fatalf("keel's record %q is visible", kv.Key)
		}
	}
	if _, err := c.Put(ctx, "\x00keel/acl/bootstrap", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put of a keel record: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := c.Delete(ctx, "\x00keel/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("delete of keel's records: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	// A delete over keel's records and other keys deletes the others and leaves the
	// records: the members' client URLs (keel records) still answer MemberList. (The
	// range stays below every other test's keys: "" --from-key would wipe them too.)
	if _, err := c.Put(ctx, "\x00judge", "x"); err != nil {
		t.Fatal(err)
	}
	del, err := c.Delete(ctx, "\x00", clientv3.WithRange("\x01"))
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete over keel's records and a key of ours: %v, %v; want our key deleted alone", del, err)
	}
	ml, err := c.MemberList(ctx)
	if err != nil || len(ml.Members) == 0 || len(ml.Members[0].ClientURLs) == 0 {
		t.Fatalf("member list after the delete around keel's records: %v, %v", ml, err)
	}
}

func TestCompaction(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	first, err := c.Put(ctx, "/compact/k", "1")
	if err != nil {
		t.Fatal(err)
	}
	last, err := c.Put(ctx, "/compact/k", "2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, last.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "/compact/k", clientv3.WithRev(first.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get below the compact revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := c.Compact(ctx, first.Header.Revision); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compact below the compact revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	wch := c.Watch(ctx, "/compact/k", clientv3.WithRev(first.Header.Revision))
	wr, ok := <-wch
	if !ok || !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision == 0 {
		t.Fatalf("watch from a compacted revision: %+v (open %v), want ErrCompacted with the compact revision", wr, ok)
	}
}

func TestMemberListAndStatus(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	ml, err := c.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || len(ml.Members[0].ClientURLs) != 1 ||
		ml.Members[0].ClientURLs[0] != "http://"+single.etcdAddr {
		t.Fatalf("member list = %v, %v", ml, err)
	}
	st, err := c.Status(ctx, single.etcdAddr)
	if err != nil || st.Version != "3.6.0" || st.Leader != ml.Members[0].ID || st.RaftTerm == 0 || st.RaftIndex == 0 ||
		st.Header.ClusterId == 0 || st.Header.MemberId != st.Leader {
		t.Fatalf("status = %+v, %v", st, err)
	}
	if al, err := c.AlarmList(ctx); err != nil || len(al.Alarms) != 0 {
		t.Fatalf("alarms = %v, %v", al, err)
	}
	if _, err := c.Defragment(ctx, single.etcdAddr); err != nil {
		t.Fatalf("defragment: %v", err)
	}
	h1, err := c.HashKV(ctx, single.etcdAddr, 0)
	if err != nil || h1.HashRevision == 0 {
		t.Fatalf("hashkv = %v, %v", h1, err)
	}
}
