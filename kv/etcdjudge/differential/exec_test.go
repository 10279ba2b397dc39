package differential

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// side is one server's run of one sequence: the numbers its abstract ranks and lease
// indexes stand for there.
type side struct {
	srv    *server
	prefix string
	// revs[0] is the server's revision before the sequence, revs[i] the revision of
	// the sequence's i-th write (a write: an operation after which etcd's revision grew).
	revs   []int64
	leases []clientv3.LeaseID
}

// result is what one operation answered on one server.
type result struct {
	resp any
	rev  int64 // the answer's header revision, 0 when it has none
	err  error
}

// shared holds the decisions both sides make alike, taken from counts that are equal
// on both (the number of writes), never from one server's numbers.
type shared struct {
	compacted int // the rank the sequence compacted at, 0 none
}

// skipped is the answer of an operation the runner leaves out on both sides (see
// normalise.go's accepted differences).
type skipped string

var watchStreams atomic.Int64

func (s *side) key(name string) string { return s.prefix + name }

// rankOf clamps a generated rank to the writes that happened.
func (s *side) rankOf(rank int) int { return min(rank, len(s.revs)-1) }

// revOf is the server's revision for a rank.
func (s *side) revOf(rank int) int64 { return s.revs[s.rankOf(rank)] }

// leaseOf is the server's lease for an index: a grant of the sequence, or for an
// index past its grants an ID that was never granted (the same on both sides).
func (s *side) leaseOf(i int) clientv3.LeaseID {
	if i < 0 {
		return clientv3.NoLease
	}
	if i < len(s.leases) {
		return s.leases[i]
	}
	return clientv3.LeaseID(1<<40 + i)
}

func (s *side) rangeOpts(g rng) []clientv3.OpOption {
	switch g.kind {
	case endKey:
		return []clientv3.OpOption{clientv3.WithRange(s.key(g.end))}
	case endPrefix:
		return []clientv3.OpOption{clientv3.WithPrefix()}
	case endFrom:
		return []clientv3.OpOption{clientv3.WithFromKey()}
	}
	return nil
}

// exec runs one operation on the side's server.
func (s *side) exec(o op, st *shared) result {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := s.srv.c
	switch o.kind {
	case kPut, kGet, kDelete:
		resp, err := c.Do(ctx, s.kvOp(o))
		switch {
		case err != nil:
			return result{err: err}
		case resp.Put() != nil:
			return result{resp: (*pb.PutResponse)(resp.Put()), rev: resp.Put().Header.Revision}
		case resp.Get() != nil:
			return result{resp: (*pb.RangeResponse)(resp.Get()), rev: resp.Get().Header.Revision}
		}
		return result{resp: (*pb.DeleteRangeResponse)(resp.Del()), rev: resp.Del().Header.Revision}
	case kTxn:
		resp, err := c.Txn(ctx).If(s.cmps(o.cmps)...).Then(s.txnOps(o.then)...).Else(s.txnOps(o.els)...).Commit()
		if err != nil {
			return result{err: err}
		}
		return result{resp: (*pb.TxnResponse)(resp), rev: resp.Header.Revision}
	case kCompact:
		if s.rankOf(o.rank) < 1 {
			return result{resp: skipped("compact before the sequence's first write")}
		}
		resp, err := c.Compact(ctx, s.revOf(o.rank))
		if err != nil {
			return result{err: err}
		}
		return result{resp: resp, rev: resp.Header.Revision}
	case kGrant:
		resp, err := c.Grant(ctx, o.ttl)
		if err != nil {
			return result{err: err}
		}
		s.leases = append(s.leases, resp.ID)
		return result{resp: resp, rev: resp.Revision}
	case kRevoke:
		resp, err := c.Revoke(ctx, s.leaseOf(o.lease))
		if err != nil {
			return result{err: err}
		}
		return result{resp: resp, rev: resp.Header.Revision}
	case kLeases:
		resp, err := c.Leases(ctx)
		if err != nil {
			return result{err: err}
		}
		return result{resp: resp}
	case kTimeToLive:
		resp, err := c.TimeToLive(ctx, s.leaseOf(o.lease), clientv3.WithAttachedKeys())
		if err != nil {
			return result{err: err}
		}
		return result{resp: resp}
	}
	return s.watch(ctx, o, st)
}

// kvOp is a put, get or delete as a clientv3 op.
func (s *side) kvOp(o op) clientv3.Op {
	opts := s.rangeOpts(o.rng)
	switch o.kind {
	case kPut:
		var po []clientv3.OpOption
		if o.prevKV {
			po = append(po, clientv3.WithPrevKV())
		}
		if o.lease >= 0 {
			po = append(po, clientv3.WithLease(s.leaseOf(o.lease)))
		}
		if o.ignVal {
			po = append(po, clientv3.WithIgnoreValue())
		}
		if o.ignLse {
			po = append(po, clientv3.WithIgnoreLease())
		}
		return clientv3.OpPut(s.key(o.rng.key), o.value, po...)
	case kDelete:
		if o.prevKV {
			opts = append(opts, clientv3.WithPrevKV())
		}
		return clientv3.OpDelete(s.key(o.rng.key), opts...)
	}
	return clientv3.OpGet(s.key(o.rng.key), append(opts, s.getOpts(o)...)...)
}

// getOpts are a get's options beyond its range.
func (s *side) getOpts(o op) []clientv3.OpOption {
	var opts []clientv3.OpOption
	if o.rank >= 0 {
		rev := s.revOf(o.rank)
		if o.future {
			rev = s.revs[len(s.revs)-1] + 1000
		}
		opts = append(opts, clientv3.WithRev(rev))
	}
	if o.limit > 0 {
		opts = append(opts, clientv3.WithLimit(o.limit))
	}
	if o.keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	if o.countOnl {
		opts = append(opts, clientv3.WithCountOnly())
	}
	if o.serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	if o.sortTarget != 0 || o.sortOrder != 0 {
		opts = append(opts, clientv3.WithSort(clientv3.SortTarget(o.sortTarget), clientv3.SortOrder(o.sortOrder)))
	}
	filters := []struct {
		rank int
		opt  func(int64) clientv3.OpOption
	}{{o.minMod, clientv3.WithMinModRev}, {o.maxMod, clientv3.WithMaxModRev},
		{o.minCre, clientv3.WithMinCreateRev}, {o.maxCre, clientv3.WithMaxCreateRev}}
	for _, f := range filters {
		if f.rank >= 0 {
			opts = append(opts, f.opt(s.revOf(f.rank)))
		}
	}
	return opts
}

func (s *side) txnOps(ops []op) []clientv3.Op {
	out := make([]clientv3.Op, 0, len(ops))
	for _, o := range ops {
		if o.kind == kTxn {
			out = append(out, clientv3.OpTxn(s.cmps(o.cmps), s.txnOps(o.then), s.txnOps(o.els)))
			continue
		}
		out = append(out, s.kvOp(o))
	}
	return out
}

func (s *side) cmps(cs []cmpOp) []clientv3.Cmp {
	out := make([]clientv3.Cmp, 0, len(cs))
	for _, c := range cs {
		k := s.key(c.rng.key)
		var cmp clientv3.Cmp
		switch c.target {
		case "value":
			cmp = clientv3.Compare(clientv3.Value(k), c.result, c.value)
		case "version":
			cmp = clientv3.Compare(clientv3.Version(k), c.result, c.num)
		case "create", "mod":
			var rev int64
			if c.rank >= 0 {
				rev = s.revOf(c.rank)
			}
			t := clientv3.CreateRevision(k)
			if c.target == "mod" {
				t = clientv3.ModRevision(k)
			}
			cmp = clientv3.Compare(t, c.result, rev)
		case "lease":
			cmp = clientv3.Compare(clientv3.LeaseValue(k), c.result, int64(s.leaseOf(c.lease)))
		}
		switch c.rng.kind {
		case endKey:
			cmp = cmp.WithRange(s.key(c.rng.end))
		case endPrefix:
			cmp = cmp.WithPrefix()
		case endFrom:
			cmp = cmp.WithRange("\x00")
		}
		out = append(out, cmp)
	}
	return out
}

// watchResult is what a watch delivered: its events up to the revision current when
// it was created, or how it ended.
type watchResult struct {
	events   []*clientv3.Event
	canceled bool
	compact  int64
	err      error
	timedOut bool
}

// watch opens a watch from a rank on a stream of its own, asks for progress and
// collects events until the progress answer: with no other writer, that is every
// event from the rank to the current revision.
func (s *side) watch(ctx context.Context, o op, st *shared) result {
	rank := s.rankOf(o.rank)
	switch {
	case rank < 1:
		return result{resp: skipped("watch from before the sequence's first write")}
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "keel-diff-stream", fmt.Sprint(watchStreams.Add(1)))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := append(s.rangeOpts(o.rng), clientv3.WithRev(s.revOf(rank)))
	if o.prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if o.noPut {
		opts = append(opts, clientv3.WithFilterPut())
	}
	if o.noDel {
		opts = append(opts, clientv3.WithFilterDelete())
	}
	wch := s.srv.c.Watch(ctx, s.key(o.rng.key), opts...)
	var wr watchResult
	timeout := time.After(5 * time.Second)
	// etcd drops a progress request while a watch of the stream is still catching up
	// (it answers none), so the request is repeated until one is answered.
	ask := time.NewTicker(50 * time.Millisecond)
	defer ask.Stop()
	if err := s.srv.c.RequestProgress(ctx); err != nil {
		return result{err: err}
	}
	for {
		select {
		case <-ask.C:
			if err := s.srv.c.RequestProgress(ctx); err != nil {
				return result{err: err}
			}
		case resp, ok := <-wch:
			if !ok {
				return result{resp: wr}
			}
			if resp.Canceled || resp.CompactRevision != 0 {
				wr.canceled, wr.compact, wr.err = resp.Canceled, resp.CompactRevision, resp.Err()
				return result{resp: wr}
			}
			if resp.IsProgressNotify() {
				return result{resp: wr}
			}
			wr.events = append(wr.events, resp.Events...)
		case <-timeout:
			wr.timedOut = true
			return result{resp: wr}
		}
	}
}
