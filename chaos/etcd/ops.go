package etcdchaos

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/chaos"
)

// Do sends r's operation (its Kind and inputs) through cl and fills in the answer. Each
// kind is the etcd request an etcd user sends for it:
//
//   - get: Range of the key (linearizable; serializable for chaos.OpGetSerial);
//   - put: Put;
//   - CAS: Txn(If mod_revision(key) == PrevRev, Then Put) — 0 is "absent", as in etcd;
//   - delete: DeleteRange of the key;
//   - txn: Txn(If mod_revision(Key) == PrevRev, Then Put Key, Put Key2, Else Range Key);
//   - scan: Range of the prefix with a limit, then the next pages as kube-apiserver
//     pages: from the key after the last one, at the first page's revision.
func Do(ctx context.Context, cl *clientv3.Client, r *chaos.Record) error {
	switch r.Kind {
	case chaos.OpGet, chaos.OpGetSerial:
		var opts []clientv3.OpOption
		if r.Kind == chaos.OpGetSerial {
			opts = append(opts, clientv3.WithSerializable())
		}
		resp, err := cl.Get(ctx, r.Key, opts...)
		if err != nil {
			return err
		}
		return FillGet(r, resp)
	case chaos.OpPut:
		resp, err := cl.Put(ctx, r.Key, r.Value)
		if err != nil {
			return err
		}
		r.Rev = resp.Header.Revision
		return nil
	case chaos.OpCAS:
		resp, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.PrevRev)).
			Then(clientv3.OpPut(r.Key, r.Value)).Commit()
		if err != nil {
			return err
		}
		r.Succeeded, r.Rev = resp.Succeeded, resp.Header.Revision
		return nil
	case chaos.OpDelete:
		resp, err := cl.Delete(ctx, r.Key)
		if err != nil {
			return err
		}
		r.Rev, r.Deleted = resp.Header.Revision, resp.Deleted
		return nil
	case chaos.OpTxn:
		resp, err := cl.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.PrevRev)).
			Then(clientv3.OpPut(r.Key, r.Value), clientv3.OpPut(r.Key2, r.Value2)).
			Else(clientv3.OpGet(r.Key)).Commit()
		if err != nil {
			return err
		}
		return FillTxn(r, resp)
	case chaos.OpScan:
		return scan(ctx, cl, r)
	}
	return fmt.Errorf("etcdchaos: no operation %s", r.Kind)
}

// FillGet records a get's answer: the read revision is the header's, the key's value
// and mod revision its KeyValue's. More than one KeyValue for one key breaks etcd's rules.
func FillGet(r *chaos.Record, resp *clientv3.GetResponse) error {
	r.Rev = resp.Header.Revision
	switch len(resp.Kvs) {
	case 0:
		return nil
	case 1:
		kv := resp.Kvs[0]
		if string(kv.Key) != r.Key {
			return fmt.Errorf("%w: get of %q returned key %q", errBadAnswer, r.Key, kv.Key)
		}
		r.Found, r.GotValue, r.ModRev = true, string(kv.Value), kv.ModRevision
		return nil
	}
	return fmt.Errorf("%w: get of one key returned %d", errBadAnswer, len(resp.Kvs))
}

// FillTxn records a txn's answer: whether the guard held, the revision (the write's on
// success), and on failure the key the Else branch read.
func FillTxn(r *chaos.Record, resp *clientv3.TxnResponse) error {
	r.Succeeded, r.Rev = resp.Succeeded, resp.Header.Revision
	if resp.Succeeded {
		return nil
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		return fmt.Errorf("%w: failed txn has %d responses, want 1 range", errBadAnswer, len(resp.Responses))
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) > 0 {
		r.Found, r.GotValue, r.ModRev = true, string(kvs[0].Value), kvs[0].ModRevision
	}
	return nil
}

// scan lists Prefix page by page on one node. The first page's header revision is the
// scan's revision; later pages are read at it (their headers carry the current
// revision, as etcd's do, so they are not compared).
func scan(ctx context.Context, cl *clientv3.Client, r *chaos.Record) error {
	end := clientv3.GetPrefixRangeEnd(r.Prefix)
	from := r.Prefix
	for page := 0; ; page++ {
		if page > 100 {
			return fmt.Errorf("%w: scan of %d keys did not end after 100 pages", errBadAnswer, len(r.Items))
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(r.Limit))}
		if page > 0 {
			opts = append(opts, clientv3.WithRev(r.Rev))
		}
		resp, err := cl.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if err := FillPage(r, page, resp); err != nil {
			return err
		}
		if !resp.More {
			return nil
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("%w: scan page %d is empty but says more", errBadAnswer, page)
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// FillPage records one page of a scan (page 0 sets the scan's revision).
func FillPage(r *chaos.Record, page int, resp *clientv3.GetResponse) error {
	if page == 0 {
		r.Rev = resp.Header.Revision
	}
	r.PageSizes = append(r.PageSizes, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r.Items = append(r.Items, chaos.ScanItem{Key: string(kv.Key), Value: string(kv.Value), ModRev: kv.ModRevision})
	}
	return nil
}
