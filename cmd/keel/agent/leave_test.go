package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

func TestLeaderLeavesUnderWriteLoad(t *testing.T) {
	c := newTestCluster(t, 3)
	lead := -1
	for i, a := range c.agents {
		if a.Node().IsLeader() {
			lead = i
		}
	}
	if lead < 0 {
		t.Fatal("no leader")
	}
	// Writers on the two other nodes; every error must be retriable, every
	// acknowledged write must survive.
	var (
		mu     sync.Mutex
		acked  []string
		failed []error
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, i := range []int{(lead + 1) % 3, (lead + 2) % 3} {
		cl := c.client(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 2000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("leave/%d/%d", w, n)
				_, err := cl.Put(context.Background(), key, []byte("v"))
				mu.Lock()
				if err == nil {
					acked = append(acked, key)
				} else if !client.IsRetriable(err) {
					failed = append(failed, err)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.agents[lead].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.agents[lead].Left():
	default:
		t.Fatal("Left not closed after Leave")
	}
	c.stop(lead)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	other := (lead + 1) % 3
	deadline := time.Now().Add(5 * time.Second)
	for len(c.agents[other].Node().Status().Members) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members after leave: %+v", c.agents[other].Node().Status().Members)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		t.Fatalf("%d non-retriable errors, first: %v", len(failed), failed[0])
	}
	v, err := c.agents[other].Node().View(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range acked {
		if _, err := v.Get([]byte(k), 0); err != nil {
			t.Fatalf("acknowledged %s lost: %v", k, err)
		}
	}
	t.Logf("%d acknowledged writes survived the leader's leave", len(acked))
}
