package etcdjudge

import (
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A typed resource's keys (written through /apis) are invisible through the etcd
// door, and neither writable nor deletable there: a delete over them and other keys
// deletes the others (kills: reads or watches not hiding reserved keys).
func TestTypedResourcesInvisible(t *testing.T) {
	schema, err := filepath.Abs("../../docs/examples/widgets-v1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNode(filepath.Join(t.TempDir(), "typed"), "-dev", "-schema", schema)
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	c, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	// The watch starts at the next revision, not "now": a watch is set up
	// asynchronously, and may start after the puts below.
	before, err := c.Get(ctx, "/registry/none")
	if err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1))
	put := func() int {
		req, _ := http.NewRequest(http.MethodPut, "http://"+n.httpAddr+"/apis/apps/v1/widgets/w1",
			strings.NewReader(`{"spec":{"size":3}}`))
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; put() != http.StatusCreated; i++ {
		if i == 200 {
			t.Fatal("PUT /apis/apps/v1/widgets/w1 never succeeded")
		}
		sleep()
	}
	if _, err := c.Put(ctx, "/registry/visible", "v"); err != nil {
		t.Fatal(err)
	}
	all, err := c.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		if strings.HasPrefix(string(kv.Key), "/registry/apps/widgets/") || strings.HasPrefix(string(kv.Key), "\x00keel/") {
			t.Fatalf("reserved key %q is visible", kv.Key)
		}
	}
	if ev := next(t, wch).Events[0]; string(ev.Kv.Key) != "/registry/visible" {
		t.Fatalf("the watch of /registry/ saw %q first", ev.Kv.Key)
	}
	if _, err := c.Put(ctx, "/registry/apps/widgets/w2", "{}"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put under a resource prefix: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := c.Delete(ctx, "/registry/apps/widgets/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("delete of a resource prefix alone: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	// A delete over the prefix and other keys deletes the others (one revision); the
	// typed resource stays.
	del, err := c.Delete(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil || del.Deleted != 1 {
		t.Fatalf("delete over a resource prefix: %v, %v; want /registry/visible deleted alone", del, err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + n.httpAddr + "/apis/apps/v1/widgets/w1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the typed resource after the delete around it: %d, want 200", resp.StatusCode)
	}
}
