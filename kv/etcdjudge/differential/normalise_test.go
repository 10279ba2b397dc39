package differential

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"
)

// This file is the one place that says what the comparison forgives. An answer of
// keel and one of etcd are equal when their normal forms (norm) are equal; the normal
// form drops or maps exactly what is listed here, and the generator (gen_test.go,
// exec_test.go) leaves out exactly the shapes listed under "accepted differences".
//
// Normalisations (the same function is applied to both servers' answers):
//
//  1. Revisions are mapped to their rank among the sequence's writes: r0 is the
//     revision before the sequence, ri the revision of its i-th write, and a revision
//     between two writes maps to the lower one. Why: keel has one revision space in
//     which its hidden records (and lease grants) take revisions too, so an etcd client
//     of keel sees gaps (docs/etcd.md "Revisions"); etcd promises only that revisions
//     increase. A write is an operation after which etcd's revision grew; keel's
//     revision for it is the header revision of keel's answer to the same operation, so
//     a write that keel failed to count shows as a rank off by one.
//  2. Response headers keep only their revision (as a rank): cluster_id, member_id
//     and raft_term name the server, not the answer.
//  3. Lease IDs are mapped to their order of grant in the sequence (L0, L1, ...): the
//     server picks them. An ID never granted prints as "L?".
//  4. A lease's remaining TTL (TimeToLive) prints as "live" when it is in (0,
//     granted]: it depends on when the question is asked. -1 (no such lease) stays.
//  5. TimeToLive's attached keys are sorted: etcd lists them in map order; so are
//     the (mapped) IDs of LeaseLeases.
//  6. Keys lose the sequence's prefix (each sequence writes under a fresh one).
//  7. A watch's events are compared as one list, whatever responses carried them:
//     how many events a response batches is the server's choice. Within one revision
//     they are sorted by key: etcd lists the events of a transaction in the order its
//     ops ran, keel in key order (its history keeps a revision's keys, not the order
//     they were written in; docs/etcd.md "Differences that remain").
//  8. Errors compare by gRPC code and message (what clients match on).
//  9. The lease of a key in a keys_only Range (not sorted by value) is not compared:
//     etcd 3.7 answers those from its in-memory index, which has no lease, so it
//     answers lease 0; keel answers the key's lease, as etcd 3.6 did (dropLeases).
//
// Accepted differences (docs/etcd.md "What is refused, and why", "Differences that
// remain"), which the generator never produces; TestRefusedShapes sends each refusal
// once to both servers and checks that etcd serves it and keel refuses it as the
// documentation says:
//
//   - non-UTF-8 keys, keys under "\x00keel/", compares over ranges that overlap them
//     and deletes of ranges wholly under them: keel refuses them (a delete over them
//     and other keys deletes the others). Every key the generator writes is ASCII under
//     the sequence's prefix, and "from key on" ranges start there ("\x00keel/" sorts
//     before every prefix);
//   - a Range or DeleteRange whose end does not sort after its key: every generated
//     range end sorts after its key (compares over empty ranges are not generated
//     either);
//   - lease TTLs below etcd's minimum (keel refuses what etcd raises): TTLs are 30 s
//     and more, longer than any sequence, so no lease expires during one;
//   - a Txn that puts a key and deletes it too, which etcd's duplicate-key check lets
//     through when the delete's range_end is "\x00" (its interval tree never finds a
//     key in [key, "\x00")) or when the put is in a nested Txn and the delete in a later
//     one (it checks a nested Txn's puts only against the deletes seen before it):
//     etcd sends both events at the transaction's revision, keel, whose history keeps
//     one version per key and revision, only the outcome. Deletes inside generated
//     transactions never run from a key on, and a transaction drawn freely (not
//     clean, see genTxn) deletes only at its own level;
//   - a Range with a sort target other than KEY, no sort order and a limit: etcd 3.7
//     takes order NONE for its default ordering when it picks how many keys to read
//     (rangeLimit), so it reads the first limit+1 keys in key order and sorts only
//     those (ascending, as a target without an order does); keel sorts the whole range,
//     as both do with an explicit ASCEND. Such ranges are generated without a limit;
//   - a LEASE compare with < or > against a lease ID: which of two leases has the
//     greater ID is the server's choice (etcd's grow, keel's do not), so LEASE compares
//     use < and > only against 0 (the key has a lease, or none);
//   - compacting at, or watching from, r0: r0 may be the previous sequence's compact
//     revision on etcd, where on keel a hidden record may lie between, so such an
//     operation is skipped on both sides.

// normer normalises one side's answers.
type normer struct{ s *side }

// norm is the normal form of one result.
func (n normer) norm(r result) string {
	if r.err != nil {
		return n.err(r.err)
	}
	switch x := r.resp.(type) {
	case skipped:
		return "skipped: " + string(x)
	case *pb.PutResponse:
		return fmt.Sprintf("put %s prev=%s", n.hdr(x.Header), n.kv(x.PrevKv))
	case *pb.RangeResponse:
		return n.rangeResp(x)
	case *pb.DeleteRangeResponse:
		return n.deleteResp(x)
	case *pb.TxnResponse:
		return n.txnResp(x)
	case *clientv3.CompactResponse:
		return "compact " + n.hdr(x.Header)
	case *clientv3.LeaseGrantResponse:
		return fmt.Sprintf("grant %s id=%s ttl=%d error=%q", n.hdr(x.ResponseHeader), n.lease(x.ID), x.TTL, x.Error)
	case *clientv3.LeaseRevokeResponse:
		return "revoke " + n.hdr(x.Header)
	case *clientv3.LeaseTimeToLiveResponse:
		return n.ttl(x)
	case *clientv3.LeaseLeasesResponse:
		ids := make([]string, 0, len(x.Leases))
		for _, l := range x.Leases {
			ids = append(ids, n.lease(l.ID))
		}
		slices.Sort(ids)
		return fmt.Sprintf("leases %s %v", n.hdr(x.ResponseHeader), ids)
	case watchResult:
		return n.watch(x)
	}
	panic(fmt.Sprintf("the judge does not know the answer type %T", r.resp)) // never "equal" by accident
}

// rev is normalisation 1.
func (n normer) rev(r int64) string {
	if r == 0 {
		return "0"
	}
	revs := n.s.revs
	if r < revs[0] {
		return fmt.Sprintf("before-r0(%d)", r)
	}
	i := sort.Search(len(revs), func(i int) bool { return revs[i] > r }) - 1
	if i == len(revs)-1 && r > revs[i]+100 {
		return fmt.Sprintf("future(r%d%+d)", i, r-revs[i])
	}
	return fmt.Sprintf("r%d", i)
}

// hdr is normalisation 2.
func (n normer) hdr(h *pb.ResponseHeader) string {
	if h == nil {
		return "header=nil"
	}
	return "@" + n.rev(h.Revision)
}

// lease is normalisation 3.
func (n normer) lease(id clientv3.LeaseID) string {
	if id == 0 {
		return "0"
	}
	if i := slices.Index(n.s.leases, id); i >= 0 {
		return fmt.Sprintf("L%d", i)
	}
	return "L?"
}

// key is normalisation 6.
func (n normer) key(k []byte) string {
	if s, ok := strings.CutPrefix(string(k), n.s.prefix); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("foreign:%q", k)
}

func (n normer) kv(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "nil"
	}
	return fmt.Sprintf("{%s=%q c=%s m=%s v=%d l=%s}", n.key(kv.Key), kv.Value, n.rev(kv.CreateRevision),
		n.rev(kv.ModRevision), kv.Version, n.lease(clientv3.LeaseID(kv.Lease)))
}

func (n normer) kvs(kvs []*mvccpb.KeyValue) string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, n.kv(kv))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func (n normer) rangeResp(x *pb.RangeResponse) string {
	return fmt.Sprintf("range %s count=%d more=%v kvs=%s", n.hdr(x.Header), x.Count, x.More, n.kvs(x.Kvs))
}

func (n normer) deleteResp(x *pb.DeleteRangeResponse) string {
	return fmt.Sprintf("delete %s deleted=%d prev=%s", n.hdr(x.Header), x.Deleted, n.kvs(x.PrevKvs))
}

func (n normer) txnResp(x *pb.TxnResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "txn %s succeeded=%v {", n.hdr(x.Header), x.Succeeded)
	for _, r := range x.Responses {
		b.WriteString(" ")
		switch y := r.Response.(type) {
		case *pb.ResponseOp_ResponseRange:
			b.WriteString(n.rangeResp(y.ResponseRange))
		case *pb.ResponseOp_ResponsePut:
			fmt.Fprintf(&b, "put %s prev=%s", n.hdr(y.ResponsePut.Header), n.kv(y.ResponsePut.PrevKv))
		case *pb.ResponseOp_ResponseDeleteRange:
			b.WriteString(n.deleteResp(y.ResponseDeleteRange))
		case *pb.ResponseOp_ResponseTxn:
			b.WriteString(n.txnResp(y.ResponseTxn))
		default:
			fmt.Fprintf(&b, "%T", r.Response)
		}
		b.WriteString(";")
	}
	b.WriteString(" }")
	return b.String()
}

// ttl is normalisations 4 and 5.
func (n normer) ttl(x *clientv3.LeaseTimeToLiveResponse) string {
	ttl := fmt.Sprint(x.TTL)
	if x.TTL > 0 && x.TTL <= x.GrantedTTL {
		ttl = "live"
	}
	keys := make([]string, 0, len(x.Keys))
	for _, k := range x.Keys {
		keys = append(keys, n.key(k))
	}
	slices.Sort(keys)
	return fmt.Sprintf("ttl %s id=%s ttl=%s granted=%d keys=%v", n.hdr(x.ResponseHeader), n.lease(x.ID), ttl,
		x.GrantedTTL, keys)
}

// watch is normalisation 7.
func (n normer) watch(x watchResult) string {
	var b strings.Builder
	b.WriteString("watch [")
	events := slices.Clone(x.events)
	slices.SortStableFunc(events, func(a, b *clientv3.Event) int {
		if c := cmp.Compare(a.Kv.ModRevision, b.Kv.ModRevision); c != 0 {
			return c
		}
		return bytes.Compare(a.Kv.Key, b.Kv.Key)
	})
	for _, ev := range events {
		fmt.Fprintf(&b, " %s %s prev=%s;", ev.Type, n.kv(ev.Kv), n.kv(ev.PrevKv))
	}
	fmt.Fprintf(&b, " ] canceled=%v compact=%s", x.canceled, n.rev(x.compact))
	if x.err != nil {
		b.WriteString(" err=" + n.err(x.err))
	}
	if x.timedOut {
		b.WriteString(" (no progress answer within 5s)")
	}
	return b.String()
}

// err is normalisation 8.
func (n normer) err(err error) string {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return fmt.Sprintf("error %v: %s", ee.Code(), ee.Error())
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("error %v: %s", st.Code(), st.Message())
	}
	return "error: " + err.Error()
}

// dropLeases is normalisation 9: it zeroes the leases in the answers of o's keys_only
// ranges (o's own, or those of its transaction's ops, nested ones included).
func dropLeases(o op, r result) {
	switch x := r.resp.(type) {
	case *pb.RangeResponse:
		if o.kind == kGet && o.keysOnly && o.sortTarget != int32(pb.RangeRequest_VALUE) {
			for _, kv := range x.Kvs {
				kv.Lease = 0
			}
		}
	case *pb.TxnResponse:
		ops := o.then
		if !x.Succeeded {
			ops = o.els
		}
		for i, resp := range x.Responses {
			if i >= len(ops) {
				return
			}
			switch y := resp.Response.(type) {
			case *pb.ResponseOp_ResponseRange:
				dropLeases(ops[i], result{resp: y.ResponseRange})
			case *pb.ResponseOp_ResponseTxn:
				dropLeases(ops[i], result{resp: y.ResponseTxn})
			}
		}
	}
}
