package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// TestSnapshotRestoreIsNotRoot is the red team's attack on saved snapshots (issue #24,
// item 2): a backup token saves, a token record is added to the file and its CRC fixed,
// and the file is restored. A backup token may save but not restore; the altered file
// is refused even to a management token, and the injected secret reads nothing; the
// saved file does not hold the cluster secret.
func TestSnapshotRestoreIsNotRoot(t *testing.T) {
	a := aclAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	boot, err := aclClient(t, a, "").ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, a, boot.SecretID)
	if _, err := mgmt.ACLPolicyPut(ctx, api.ACLPolicy{Name: "backup", Operator: []string{api.RightSnapshot}}); err != nil {
		t.Fatal(err)
	}
	tok, err := mgmt.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{"backup"}})
	if err != nil {
		t.Fatal(err)
	}
	backup := aclClient(t, a, tok.SecretID)
	if _, err := mgmt.Put(ctx, "secret/k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	saved := saveSnapshot(ctx, t, backup)
	_, clusterSecret, ok := a.Store().ClusterMeta()
	if !ok || bytes.Contains(saved, clusterSecret) {
		t.Fatalf("the saved file holds the cluster secret (cluster has one: %v)", ok)
	}
	if err := backup.RestoreSnapshot(ctx, bytes.NewReader(saved)); !client.IsForbidden(err) {
		t.Fatalf("restore with the backup token = %v, want 403", err)
	}

	const injected = "keel_injectedinjectedinjectedinjectedinjectedi"
	tampered := injectToken(t, saved, injected)
	if err := backup.RestoreSnapshot(ctx, bytes.NewReader(tampered)); !client.IsForbidden(err) {
		t.Fatalf("restore of the tampered file with the backup token = %v, want 403", err)
	}
	if err := mgmt.RestoreSnapshot(ctx, bytes.NewReader(tampered)); !client.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "altered") {
		t.Fatalf("restore of the tampered file = %v, want 400 saying it was altered", err)
	}
	if _, err := aclClient(t, a, injected).Get(ctx, "secret/k"); !client.IsUnauthorized(err) {
		t.Fatalf("the injected token reads: %v, want 401", err)
	}
	// The untouched file restores (management only), and the cluster keeps its secret.
	if err := mgmt.RestoreSnapshot(ctx, bytes.NewReader(saved)); err != nil {
		t.Fatalf("restore of the saved file: %v", err)
	}
	if _, s, _ := a.Store().ClusterMeta(); !bytes.Equal(s, clusterSecret) {
		t.Fatalf("the restore changed the cluster secret")
	}
	if kv, err := mgmt.Get(ctx, "secret/k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("after restore: %q, %v", kv.Value, err)
	}
}

func saveSnapshot(ctx context.Context, t *testing.T, c *client.Client) []byte {
	t.Helper()
	body, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// injectToken adds a management token record with the given secret to a saved file
// and writes a valid fsm stream (its CRC fixed) back between the original head and MAC.
func injectToken(t *testing.T, saved []byte, secret string) []byte {
	t.Helper()
	inner := saved[savedHead : len(saved)-savedMACSize]
	st := fsm.NewStore()
	if err := st.Restore(bytes.NewReader(inner)); err != nil {
		t.Fatalf("reading the saved stream: %v", err)
	}
	h := sha256.Sum256([]byte(secret))
	rec := `{"accessor_id":"00000000-0000-4000-8000-000000000001","policies":["` + api.ManagementPolicy + `"],"create_time":"2026-01-01T00:00:00Z"}`
	cmd := &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut,
		Key: []byte("\x00keel/acl/tokens/" + hex.EncodeToString(h[:])), Value: []byte(rec)}}}}
	if res := st.ApplyCommand(st.AppliedIndex()+1, cmd); res.Err != nil {
		t.Fatal(res.Err)
	}
	var out bytes.Buffer
	out.Write(saved[:savedHead])
	if _, err := st.Snapshot().WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	out.Write(saved[len(saved)-savedMACSize:])
	return out.Bytes()
}
