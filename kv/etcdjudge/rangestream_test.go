package etcdjudge

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// etcdRangeResponse is the message clientv3.GetResponse converts to.
type etcdRangeResponse = etcdserverpb.RangeResponse

// streamChunks reads every chunk of a GetStream, failing the test on a stream error.
func streamChunks(t *testing.T, ch clientv3.GetStreamChan) []clientv3.RangeStreamResponse {
	t.Helper()
	var out []clientv3.RangeStreamResponse
	for r := range ch {
		if err := r.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		out = append(out, r)
	}
	return out
}

// RangeStream (etcd 3.7, what kube-apiserver tries first) answers a range in chunks
// whose merge is the Range answer: disjoint key slices in order, header, count and
// more on the last chunk only, one revision for the whole stream; limit, revision and
// count_only as Range; custom sorts and revision filters refused as etcd refuses them;
// keys keel hides never streamed (kills: RangeStream Unimplemented; one chunk for
// everything; a chunk repeating or skipping keys; count of the chunk instead of the
// range; hidden keys streamed).
func TestRangeStream(t *testing.T) {
	c, ctx := newClient(t), testCtx(t)
	var mid int64
	for i := range 100 {
		resp, err := c.Put(ctx, fmt.Sprintf("/stream/%03d", i), strings.Repeat("v", 100))
		if err != nil {
			t.Fatal(err)
		}
		if i == 39 {
			mid = resp.Header.Revision
		}
	}
	cases := []struct {
		name string
		key  string
		opts []clientv3.OpOption
	}{
		{"prefix", "/stream/", []clientv3.OpOption{clientv3.WithPrefix()}},
		{"limit", "/stream/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(25)}},
		{"revision", "/stream/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(mid)}},
		{"keys only", "/stream/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}},
		{"count only", "/stream/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}},
		{"one key", "/stream/007", nil},
		{"every key", "\x00", []clientv3.OpOption{clientv3.WithFromKey()}},
	}
	for _, tc := range cases {
		want, err := c.Get(ctx, tc.key, tc.opts...)
		if err != nil {
			t.Fatalf("%s: get: %v", tc.name, err)
		}
		ch, err := c.GetStream(ctx, tc.key, tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		chunks := streamChunks(t, ch)
		checkChunks(t, tc.name, chunks)
		merged := &clientv3.GetResponse{}
		for _, ck := range chunks {
			proto.Merge((*etcdRangeResponse)(merged), ck.RangeResponse)
		}
		if !proto.Equal((*etcdRangeResponse)(merged), (*etcdRangeResponse)(want)) {
			t.Errorf("%s: merged stream = %d kvs, count %d, more %v, header %v; Range = %d kvs, count %d, more %v, header %v",
				tc.name, len(merged.Kvs), merged.Count, merged.More, merged.Header, len(want.Kvs), want.Count, want.More, want.Header)
		}
		for _, kv := range merged.Kvs {
			if strings.HasPrefix(string(kv.Key), "\x00keel/") {
				t.Fatalf("%s: streamed keel's record %q", tc.name, kv.Key)
			}
		}
		if tc.name == "prefix" && len(chunks) < 3 {
			t.Errorf("prefix: 100 keys in %d chunks; want several (etcd starts at 10 keys a chunk)", len(chunks))
		}
	}
	for _, opt := range []clientv3.OpOption{clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend),
		clientv3.WithMinModRev(mid)} {
		ch, err := c.GetStream(ctx, "/stream/", clientv3.WithPrefix(), opt)
		if err == nil {
			for r := range ch {
				err = r.Err()
			}
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("a stream with a custom sort or a revision filter: %v, want Unimplemented as etcd", err)
		}
	}
}

// checkChunks asserts etcd's chunk contract: only the last chunk carries the header,
// count and more.
func checkChunks(t *testing.T, name string, chunks []clientv3.RangeStreamResponse) {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatalf("%s: no chunk", name)
	}
	for i, ck := range chunks {
		last := i == len(chunks)-1
		if (ck.Header != nil) != last || (!last && (ck.Count != 0 || ck.More)) {
			t.Fatalf("%s: chunk %d of %d: header %v, count %d, more %v; want them on the last chunk only",
				name, i, len(chunks), ck.Header, ck.Count, ck.More)
		}
	}
}
