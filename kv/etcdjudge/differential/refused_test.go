package differential

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRefusedShapes holds the accepted differences of normalise_test.go that are
// keel's refusals to their word: each shape is one etcd serves and keel refuses with
// the code docs/etcd.md ("What is refused, and why") gives. The generator never sends
// them; this test sends each once to both servers, so that a refusal keel stops
// making (or one etcd starts making) shows, and the list stays true.
func TestRefusedShapes(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(ctx context.Context, c *clientv3.Client) error
		keel codes.Code
	}{
		{"a key that is not UTF-8", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, "refused/\xff\xfe", "v")
			return err
		}, codes.InvalidArgument},
		{`a put under "\x00keel/"`, func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, "\x00keel/etcddiff", "v")
			return err
		}, codes.PermissionDenied},
		{`a delete of a range wholly under "\x00keel/"`, func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Delete(ctx, "\x00keel/", clientv3.WithPrefix())
			return err
		}, codes.PermissionDenied},
		{`a compare over a range overlapping "\x00keel/"`, func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version("\x00"), ">", 0).WithRange("\x01")).Commit()
			return err
		}, codes.PermissionDenied},
		{"a range whose end sorts before its key", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Get(ctx, "refused/b", clientv3.WithRange("refused/a"))
			return err
		}, codes.InvalidArgument},
		{"a lease TTL below etcd's minimum", func(ctx context.Context, c *clientv3.Client) error {
			resp, err := c.Grant(ctx, 0)
			if err == nil {
				c.Revoke(ctx, resp.ID)
			}
			return err
		}, codes.InvalidArgument},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.do(ctx, etcdSrv.c); err != nil {
			t.Errorf("%s: etcd refuses it too (%v): no longer a difference, let the generator send it", c.name, err)
		}
		err := c.do(ctx, keelSrv.c)
		cancel()
		if got := status.Code(toStatus(err)); got != c.keel {
			t.Errorf("%s: keel answers %v (%v), want %v as docs/etcd.md says", c.name, got, err, c.keel)
		}
	}
}

// toStatus turns clientv3's typed errors back into a gRPC status.
func toStatus(err error) error {
	if ee, ok := err.(interface{ Code() codes.Code }); ok && err != nil {
		return status.Error(ee.Code(), err.Error())
	}
	return err
}
