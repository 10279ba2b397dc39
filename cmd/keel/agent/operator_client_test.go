package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

// TestOperatorRoutesThroughClient drives every operator route the CLI uses through the
// Go client, against a one-node cluster: the paths and bodies of kv/api match what the
// agent serves.
func TestOperatorRoutesThroughClient(t *testing.T) {
	c := newTestCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client(0)

	ms, err := cl.Members(ctx)
	if err != nil || len(ms) != 1 || ms[0].ID != "n1" || !ms[0].Leader || ms[0].Suffrage != "Voter" {
		t.Fatalf("Members = %+v, %v", ms, err)
	}
	raw, err := cl.Versions(ctx)
	if err != nil || !json.Valid(raw) {
		t.Fatalf("Versions = %s, %v", raw, err)
	}
	m, err := cl.Metrics(ctx)
	if err != nil || !bytes.Contains(m, []byte("go_goroutines")) {
		t.Fatalf("Metrics: %v (%d bytes)", err, len(m))
	}
	if err := cl.RemovePeer(ctx, "nope"); !client.IsNotFound(err) {
		t.Fatalf("RemovePeer(nope) = %v, want 404", err)
	}
	if err := cl.RemovePeer(ctx, "n1"); !client.IsBadRequest(err) {
		t.Fatalf("RemovePeer(last voter) = %v, want 400", err)
	}

	if _, err := cl.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	body, err := cl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := io.ReadAll(body)
	body.Close()
	if err != nil || len(saved) == 0 {
		t.Fatalf("Snapshot: %d bytes, %v", len(saved), err)
	}
	if _, err := cl.Put(ctx, "a", []byte("2")); err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(saved)
	damaged[len(damaged)/2] ^= 0xff
	if err := cl.RestoreSnapshot(ctx, bytes.NewReader(damaged)); !client.IsBadRequest(err) {
		t.Fatalf("RestoreSnapshot(damaged) = %v, want 400", err)
	}
	if err := cl.RestoreSnapshot(ctx, bytes.NewReader(saved)); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	kv, err := cl.Get(ctx, "a")
	if err != nil || string(kv.Value) != "1" {
		t.Fatalf("after restore: %+v, %v", kv, err)
	}

	id, err := cl.Leave(ctx)
	if err != nil && !client.IsRetriable(err) || err == nil && id != "n1" {
		t.Fatalf("Leave = %q, %v", id, err)
	}
}
