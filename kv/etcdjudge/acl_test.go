package etcdjudge

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// keelCLI runs the keel CLI against n's HTTP port with the given token.
func keelCLI(t *testing.T, n *node, token string, args ...string) string {
	t.Helper()
	cmd := exec.Command(keelBin, append([]string{"-addr", n.httpAddr}, args...)...)
	cmd.Env = append(os.Environ(), "KEEL_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("keel %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// readSecret reads a secret written by -secret-file.
func readSecret(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// An etcd client authenticates with a keel token: as the "token" metadata, or through
// Authenticate (user "keel", the secret as password). The token's rights hold.
func TestACLTokens(t *testing.T) {
	dir := t.TempDir()
	n, err := startNode(filepath.Join(dir, "acl"), "-dev", "-acl-default", "deny")
	if err != nil {
		t.Fatal(err)
	}
	defer n.stop()
	ctx := testCtx(t)
	anon, err := n.client()
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	// etcd's answer to a call without a token: no user (which clients do not retry)
	if _, err := anon.Put(ctx, "/app/x", "1"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("put without a token before bootstrap (deny): %v, want %v", err, rpctypes.ErrUserEmpty)
	}
	keelCLI(t, n, "", "acl", "bootstrap", "-secret-file", filepath.Join(dir, "mgmt"))
	mgmt := readSecret(t, filepath.Join(dir, "mgmt"))
	keelCLI(t, n, mgmt, "acl", "policy", "put", "app", "-write", "/app/")
	keelCLI(t, n, mgmt, "acl", "token", "create", "-policy", "app", "-secret-file", filepath.Join(dir, "app"))
	app := readSecret(t, filepath.Join(dir, "app"))

	// The secret as the token metadata.
	if _, err := anon.Put(metadata.AppendToOutgoingContext(ctx, "token", app), "/app/x", "1"); err != nil {
		t.Fatalf("put with the app token: %v", err)
	}
	// Through Authenticate.
	c, err := n.client(func(cfg *clientv3.Config) { cfg.Username, cfg.Password = "keel", app })
	if err != nil {
		t.Fatalf("client with user keel and the app token: %v", err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "/app/y", "2"); err != nil {
		t.Fatalf("put as user keel: %v", err)
	}
	if _, err := c.Put(ctx, "/other/y", "2"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put outside the token's prefix: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := c.Get(ctx, "", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("get of every key: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := c.Compact(ctx, 1); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("compact without the compact right: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	ch, err := c.GetStream(ctx, "/other/", clientv3.WithPrefix())
	if err == nil {
		for r := range ch {
			err = r.Err()
		}
	}
	if !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
		t.Fatalf("range stream outside the token's prefix: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	// (SnapshotWithVersion hands back the gRPC status: rpctypes.Error makes it etcd's.)
	if _, err := c.SnapshotWithVersion(ctx); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
		t.Fatalf("snapshot without the snapshot right: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	if _, err := c.MemberRemove(ctx, 1); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("member remove without the peers right: %v, want %v", err, rpctypes.ErrPermissionDenied)
	}
	wr := <-c.Watch(ctx, "/other/", clientv3.WithPrefix())
	if !errors.Is(wr.Err(), rpctypes.ErrPermissionDenied) {
		t.Fatalf("watch outside the token's prefix: %v, want %v", wr.Err(), rpctypes.ErrPermissionDenied)
	}
	if _, err := n.client(func(cfg *clientv3.Config) { cfg.Username, cfg.Password = "keel", "wrong" }); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("Authenticate with a wrong secret: %v, want %v", err, rpctypes.ErrAuthFailed)
	}
	if _, err := anon.Get(ctx, "/app/x"); !errors.Is(err, rpctypes.ErrUserEmpty) {
		t.Fatalf("get without a token: %v, want %v", err, rpctypes.ErrUserEmpty)
	}
}
