package etcdjudge

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/internal/freeport"
)

// A node's etcd door answers only once the node's start records (the genesis record,
// the cluster secret, its etcd URL) are applied, as etcd serves clients only once it
// has published its member attributes: an etcd client polling a starting node never
// sees revision 0 (a fresh etcd is at 1; kube-apiserver refuses 0), and the revision
// of its first answer is 2 (the genesis record 1, the node's etcd URL record 2: the
// URL written first left a cluster without a genesis record, at 1) and still the
// node's revision a second later, nothing written (kills: the door serving from the start, red in 5 of 7 runs: the window is short.
// Opening it before the URL record is applied survives: the record is proposed as soon
// as there is a leader and lands before the secret the gate also waits for).
func TestDoorOpensAfterStartRecords(t *testing.T) {
	n, _, err := launchNode(filepath.Join(t.TempDir(), "start"), freeport.Addr(), nil, "-dev")
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	c, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := firstAnswer(t, c)
	if first != 2 {
		t.Errorf("a fresh node answered first at revision %d, want 2 (the genesis record, then the etcd URL record)", first)
	}
	time.Sleep(time.Second)
	ctx := testCtx(t)
	for _, opts := range [][]clientv3.OpOption{nil, {clientv3.WithSerializable()}} {
		resp, err := c.Get(ctx, "/start/none", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision != first {
			t.Fatalf("revision %d a second after the first answer (%d): the node wrote after its door opened",
				resp.Header.Revision, first)
		}
	}
}

// firstAnswer polls the starting node with Status until it names a leader, then at
// once with a linearizable and a serializable get (what a client that waited for a
// leader does first), and returns the revision of the first answer, failing on any
// answer at revision 0.
func firstAnswer(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, c.Endpoints()[0])
		cancel()
		if err != nil || st.Leader == 0 {
			continue
		}
		var rev int64
		for _, opts := range [][]clientv3.OpOption{nil, {clientv3.WithSerializable()}} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.Get(ctx, "/start/none", opts...)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if resp.Header.Revision <= 0 {
				t.Fatalf("answered at revision %d once Status named a leader", resp.Header.Revision)
			}
			rev = resp.Header.Revision
		}
		return rev
	}
	t.Fatal("no leader within 30 s")
	return 0
}
