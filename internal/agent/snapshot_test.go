package agent

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/client"
)

func TestSnapshotSaveAndRestoreCluster(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	cl := c.client(0)
	if _, err := cl.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + c.agents[1].HTTPAddr() + "/v1/agent/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	saved, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(saved) == 0 {
		t.Fatalf("save: %d, %d bytes", resp.StatusCode, len(saved))
	}
	if _, err := cl.Put(ctx, "a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	lead, follower := -1, -1
	for i, a := range c.agents {
		if a.Node().IsLeader() {
			lead = i
		} else {
			follower = i
		}
	}
	post := func(i int, body []byte) int {
		resp, err := http.Post("http://"+c.agents[i].HTTPAddr()+"/v1/agent/snapshot", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	damaged := bytes.Clone(saved)
	damaged[len(damaged)/2] ^= 0xff
	if code := post(lead, damaged); code != 400 {
		t.Fatalf("damaged snapshot: %d, want 400", code)
	}
	if code := post(follower, saved); code != 503 {
		t.Fatalf("restore on a follower: %d, want 503", code)
	}
	if kv, err := cl.Get(ctx, "a"); err != nil || string(kv.Value) != "2" {
		t.Fatalf("a after refused restores = %q, %v", kv.Value, err)
	}
	if code := post(lead, saved); code != 200 {
		t.Fatalf("restore: %d", code)
	}
	// Every node serves the restored state.
	for i := range c.agents {
		cli := c.client(i)
		deadline := time.Now().Add(10 * time.Second)
		for {
			kv, err := cli.Get(ctx, "a")
			_, berr := cli.Get(ctx, "b")
			if err == nil && string(kv.Value) == "1" && client.IsNotFound(berr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d after restore: a=%q (%v), b err %v", i, kv.Value, err, berr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	want := c.agents[lead].Store().View().Hash()
	for i, a := range c.agents {
		v, err := a.Node().View(ctx, fsm.Linearizable)
		if err != nil || v.Hash() != want {
			t.Fatalf("node %d state differs after restore (%v)", i, err)
		}
	}
	if _, err := cl.Put(ctx, "after", []byte("restore")); err != nil {
		t.Fatalf("write after restore: %v", err)
	}
}
