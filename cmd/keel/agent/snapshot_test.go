package agent

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
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

// TestSnapshotRestoreRefusesForeignAndSaysDamaged: a snapshot of another cluster is
// refused (400, naming both clusters) and changes nothing, unless forced; a damaged
// file is called damaged, another file "not a keel snapshot".
func TestSnapshotRestoreRefusesForeignAndSaysDamaged(t *testing.T) {
	ours, theirs := newTestCluster(t, 1), newTestCluster(t, 1)
	ctx := context.Background()
	cl, other := ours.client(0), theirs.client(0)
	if _, err := cl.Put(ctx, "k", []byte("ours")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, "k", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	body, err := other.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := io.ReadAll(body)
	body.Close()
	body, err = cl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := io.ReadAll(body)
	body.Close()

	for i, tc := range []struct {
		file []byte
		want string
	}{
		{foreign, "belongs to cluster"},
		{own[:len(own)/2], "damaged"},
		{flip(own, len(own)-2), "damaged"},
		{[]byte("PK\x03\x04 a zip file, not a snapshot"), "not a keel snapshot"},
		{own[savedHead : len(own)-savedMACSize], "carries no MAC"}, // as a release before the MAC saved it
	} {
		err := cl.RestoreSnapshot(ctx, bytes.NewReader(tc.file))
		if !client.IsBadRequest(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("#%d: restore = %v, want 400 saying %q", i, err, tc.want)
		}
		if kv, err := cl.Get(ctx, "k"); err != nil || string(kv.Value) != "ours" {
			t.Fatalf("#%d: after a refused restore k = %q, %v; want ours", i, kv.Value, err)
		}
	}
	if err := cl.RestoreSnapshotWith(ctx, bytes.NewReader(foreign), client.RestoreOptions{ForceForeign: true}); err != nil {
		t.Fatalf("forced foreign restore: %v", err)
	}
	if kv, err := cl.Get(ctx, "k"); err != nil || string(kv.Value) != "theirs" {
		t.Fatalf("after the forced restore k = %q, %v; want theirs", kv.Value, err)
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0xff
	return b
}
