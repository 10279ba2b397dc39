package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

// TestStreamLeases: with Options.Stream, a grant, a put attached to the lease and a
// revoke go over the stream protocol (no HTTP request) and do what their HTTP routes
// do: the revoke deletes the key; a put to a lease that does not exist is 404
// LeaseNotFound and writes nothing; a bad TTL is a 400.
func TestStreamLeases(t *testing.T) {
	f := newFixture(t)
	c := f.streamClient(t, f.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.Grant(ctx, 30*time.Second)
	if err != nil || g.ID == 0 || g.TTL != 30 {
		t.Fatalf("grant = %+v, %v", g, err)
	}
	if _, err := c.PutLease(ctx, "l/a", []byte("v"), g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutLease(ctx, "l/b", []byte("v"), g.ID+1); !client.IsLeaseNotFound(err) {
		t.Fatalf("put to a missing lease = %v, want 404 LeaseNotFound", err)
	}
	if _, err := c.Get(ctx, "l/b"); !client.IsNotFound(err) {
		t.Fatalf("the refused put wrote l/b: %v", err)
	}
	if _, err := c.Grant(ctx, 0); err == nil || !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("grant of ttl 0 = %v, want 400", err)
	}
	r, err := c.Revoke(ctx, g.ID)
	if err != nil || r.Deleted != 1 || r.Revision == 0 {
		t.Fatalf("revoke = %+v, %v", r, err)
	}
	if _, err := c.Get(ctx, "l/a"); !client.IsNotFound(err) {
		t.Fatalf("key of a revoked lease: %v", err)
	}
	if _, err := c.Revoke(ctx, g.ID); !client.IsLeaseNotFound(err) {
		t.Fatalf("second revoke = %v, want 404 LeaseNotFound", err)
	}
	if n := f.sent.n.Load(); n != 0 {
		t.Fatalf("%d requests went over HTTP, want none", n)
	}
}

func isStatus(err error, code int) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == code
}

// TestStreamLeasesOldNode: a node whose stream upgrade does not offer leases (an
// older release) is asked over HTTP, and the lease calls work.
func TestStreamLeasesOldNode(t *testing.T) {
	f := oldStreamNode(t)
	c := f.streamClient(t, f.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.Grant(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutLease(ctx, "l/a", []byte("v"), g.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Revoke(ctx, g.ID); err != nil || r.Deleted != 1 {
		t.Fatalf("revoke = %+v, %v", r, err)
	}
	if n := f.sent.n.Load(); n != 3 {
		t.Fatalf("%d requests over HTTP, want 3 (grant, put, revoke)", n)
	}
}
