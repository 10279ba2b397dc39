package etcdjudge

import (
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// -etcd-watch-progress-notify-interval is etcd's --watch-progress-notify-interval: an
// idle watch created with progress_notify hears the revision it reached that often
// (kube-apiserver's bookmarks ride on it; its storage tests run etcd at 1 s). Two
// notifications within 3 s of a 300 ms interval, each at the node's revision (kills:
// the flag missing or ignored, the 10-minute default kept).
func TestWatchProgressNotifyInterval(t *testing.T) {
	n, err := startNode(filepath.Join(t.TempDir(), "progress"), "-dev", "-etcd-watch-progress-notify-interval", "300ms")
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
	put, err := c.Put(ctx, "/progress/a", "1")
	if err != nil {
		t.Fatal(err)
	}
	wch := c.Watch(ctx, "/progress/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision+1),
		clientv3.WithProgressNotify())
	deadline := time.After(3 * time.Second)
	for got := 0; got < 2; {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			if !wr.IsProgressNotify() {
				t.Fatalf("events on an idle watch: %v", wr.Events)
			}
			if wr.Header.Revision != put.Header.Revision {
				t.Fatalf("progress at revision %d, want %d", wr.Header.Revision, put.Header.Revision)
			}
			got++
		case <-deadline:
			t.Fatalf("%d progress notifications within 3 s of a 300ms interval, want 2", got)
		}
	}
}
