package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

// TestClusterWritesAnywhereReadsEverywhere: writes through every node (followers
// forward), linearizable reads on every node see each acknowledged write at once.
func TestClusterWritesAnywhereReadsEverywhere(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 30; i++ {
		writer := c.client(i % 3)
		key := fmt.Sprintf("k%02d", i)
		rev, err := writer.Put(ctx, key, []byte(fmt.Sprintf("v%d", i)))
		if err != nil {
			t.Fatalf("#%d: put via node %d: %v", i, i%3, err)
		}
		reader := c.client((i + 1) % 3)
		got, err := reader.Get(ctx, key)
		if err != nil {
			t.Fatalf("#%d: linearizable get via node %d: %v", i, (i+1)%3, err)
		}
		if string(got.Value) != fmt.Sprintf("v%d", i) || got.ModRevision != rev {
			t.Errorf("#%d: got %q at mod rev %d, want %q at %d", i, got.Value, got.ModRevision, fmt.Sprintf("v%d", i), rev)
		}
	}
	c.waitConverged()
}

// TestClusterPagedScanResumesOnAnotherNode: a scan started on one node continues on
// another node and after that node restarts, all at the first page's revision, while
// writes go on.
func TestClusterPagedScanResumesOnAnotherNode(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 1000
	w := c.client(0)
	for i := 0; i < n; i++ {
		if _, err := w.Put(ctx, fmt.Sprintf("scan/%04d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.client(0).List(ctx, "scan/", client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	rev := page.Revision
	seen := len(page.Items)
	// Writes after the first page must not show up in later pages.
	for i := 0; i < 50; i++ {
		if _, err := w.Put(ctx, fmt.Sprintf("scan/%04d", i+n), []byte("late")); err != nil {
			t.Fatal(err)
		}
	}
	for hop := 1; page.Continue != ""; hop++ {
		if hop == 5 {
			c.restart(2)
			c.waitReady(2)
		}
		node := 1 + hop%2
		page, err = c.client(node).List(ctx, "scan/", client.ListOptions{Limit: 100, Continue: page.Continue})
		if err != nil {
			t.Fatalf("page %d on node %d: %v", hop, node, err)
		}
		if page.Revision != rev {
			t.Fatalf("page %d: revision %d, want %d", hop, page.Revision, rev)
		}
		if len(page.Items) > 100 {
			t.Fatalf("page %d: %d items, limit 100", hop, len(page.Items))
		}
		for _, kv := range page.Items {
			if want := fmt.Sprintf("scan/%04d", seen); kv.Key != want {
				t.Fatalf("page %d: key %q, want %q", hop, kv.Key, want)
			}
			seen++
		}
	}
	if seen != n {
		t.Errorf("scan saw %d keys, want %d", seen, n)
	}
}

// TestClusterCompactedScanIs410WithInconsistentContinue: compaction past a scan's
// revision gives 410 on any node, and the inconsistent token finishes the scan.
func TestClusterCompactedScanIs410WithInconsistentContinue(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := c.client(1)
	for i := 0; i < 300; i++ {
		if _, err := w.Put(ctx, fmt.Sprintf("c/%03d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	first, err := w.List(ctx, "c/", client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	last, err := w.Put(ctx, "c/zzz", []byte("after"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(2).Compact(ctx, last); err != nil {
		t.Fatalf("compact: %v", err)
	}
	_, err = c.client(0).List(ctx, "c/", client.ListOptions{Limit: 100, Continue: first.Continue})
	if !client.IsCompacted(err) {
		t.Fatalf("continue after compaction: err = %v, want 410", err)
	}
	var cerr *client.Error
	if !errors.As(err, &cerr) || cerr.Continue == "" {
		t.Fatalf("410 without an inconsistent continue token: %#v", err)
	}
	rest, err := c.client(0).List(ctx, "c/", client.ListOptions{Limit: 1000, Continue: cerr.Continue})
	if err != nil {
		t.Fatalf("inconsistent continue: %v", err)
	}
	if len(rest.Items) != 201 || rest.Items[0].Key != "c/100" {
		t.Errorf("inconsistent continuation: %d items starting %q, want 201 from c/100", len(rest.Items), rest.Items[0].Key)
	}
}

// TestClusterLeaderStopUnderLoad: the leader stops gracefully while clients write;
// no write fails with a non-retriable error, every acknowledged write survives on the
// remaining nodes, and the restarted node catches up.
func TestClusterLeaderStopUnderLoad(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := c.leader()
	var others []string
	for i, a := range c.agents {
		if i != lead {
			others = append(others, a.HTTPAddr())
		}
	}
	cl, err := client.New(append(others, c.agents[lead].HTTPAddr()), client.Options{MaxRetries: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg    sync.WaitGroup
		acked sync.Map
		fails atomic.Int64
		stop  atomic.Bool
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 400 && !stop.Load(); i++ {
				key := fmt.Sprintf("load/%d/%d", w, i)
				if _, err := cl.Put(ctx, key, []byte("v")); err != nil {
					if !client.IsRetriable(err) {
						t.Errorf("put %s: non-retriable error %v", key, err)
					}
					fails.Add(1)
					continue
				}
				acked.Store(key, true)
			}
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	c.stop(lead)
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	survivor := (lead + 1) % 3
	check := c.client(survivor)
	n := 0
	acked.Range(func(k, _ any) bool {
		n++
		if _, err := check.Get(ctx, k.(string)); err != nil {
			t.Errorf("acknowledged %s lost: %v", k, err)
		}
		return true
	})
	t.Logf("%d acknowledged writes checked, %d retriable failures", n, fails.Load())
	if n == 0 {
		t.Fatal("no write was acknowledged")
	}
	c.cfgs[lead].Raft.Bootstrap = false
	c.cfgs[lead].Raft.Join = nil
	c.start(lead)
	c.waitReady(lead)
	c.waitConverged()
}

// TestRestartWholeClusterKeepsDataAndTokens: every node stops; started again from its
// data dir with no flags, the cluster has its data, and a continue token minted before
// the restart still works.
func TestRestartWholeClusterKeepsDataAndTokens(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := c.client(0)
	for i := 0; i < 20; i++ {
		if _, err := w.Put(ctx, fmt.Sprintf("r/%02d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	page, err := w.List(ctx, "r/", client.ListOptions{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.agents {
		c.stop(i)
	}
	for i := range c.agents {
		c.cfgs[i].Raft.Bootstrap = false
		c.cfgs[i].Raft.Join = nil
		c.start(i)
	}
	for i := range c.agents {
		c.waitReady(i)
	}
	rest, err := c.client(2).List(ctx, "r/", client.ListOptions{Limit: 100, Continue: page.Continue})
	if err != nil {
		t.Fatalf("token after restart: %v", err)
	}
	if len(rest.Items) != 15 || rest.Revision != page.Revision {
		t.Errorf("after restart: %d items at rev %d, want 15 at %d", len(rest.Items), rest.Revision, page.Revision)
	}
}
