package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// oneNode is a one-node cluster without gossip (as `make run` starts) whose node has
// the schema file name.
func oneNode(t *testing.T, schema string) *Agent {
	t.Helper()
	c := newTestClusterWith(t, 1, nil, func(cfg *Config) { *cfg = withSchema(*cfg, loadTestSchema(t, schema)) })
	a := c.agents[0]
	waitFor(t, "registered", 20*time.Second, func() error { return a.versions.Ready(context.Background()) })
	return a
}

// TestStorageStateHashIsDiscoveryHash: the StorageState's current storage version hash
// is the hash GET /apis serves, and its persisted hashes are the hashes of the stored
// versions (the KEP's trigger compares exactly these).
//
// Kills: a StorageState without hashes, or hashing otherwise than discovery does.
func TestStorageStateHashIsDiscoveryHash(t *testing.T) {
	a := oneNode(t, "widgets-v1v2.yaml")
	if code := apiCall(t, a, "PUT", "/apis/apps/v2/widgets/a", map[string]any{}, nil); code != http.StatusCreated {
		t.Fatalf("PUT = %d", code)
	}
	var disc struct {
		Resources []struct {
			Name               string `json:"name"`
			StorageVersion     string `json:"storageVersion"`
			StorageVersionHash string `json:"storageVersionHash"`
		} `json:"resources"`
	}
	if code := apiCall(t, a, "GET", "/apis", nil, &disc); code != http.StatusOK || len(disc.Resources) != 1 {
		t.Fatalf("GET /apis = %d %+v", code, disc)
	}
	d := disc.Resources[0]
	waitFor(t, "storage state with the discovery hash", 10*time.Second, func() error {
		var rep versions.Report
		if code := apiCall(t, a, "GET", api.PathVersions, nil, &rep); code != http.StatusOK || len(rep.Resources) != 1 {
			return fmt.Errorf("GET /v1/versions = %d %+v", code, rep)
		}
		ss := rep.Resources[0].StorageState
		if ss.CurrentStorageVersionHash != d.StorageVersionHash ||
			!slices.Equal(ss.PersistedStorageVersionHashes, []string{d.StorageVersionHash}) ||
			!slices.Equal(ss.PersistedEncodingVersions, []string{d.StorageVersion}) {
			return fmt.Errorf("storage state %+v; discovery serves %s for %s", ss, d.StorageVersionHash, d.StorageVersion)
		}
		return nil
	})
}

// TestKeyMigrationOneNodeNoGossip: on a one-node cluster without gossip (`make run`)
// the only member is the node answering, so its own support is known: advance walks
// 0 → 1 → 2 back to back, and the status lists the node as ok in the current phase.
//
// Kills: a node without gossip that knows no member's support ("the members' support is
// unknown (gossip is off)": no step could be taken at all).
func TestKeyMigrationOneNodeNoGossip(t *testing.T) {
	a := oneNode(t, "widgets-keymig.yaml")
	if a.gossip != nil {
		t.Fatal("the test wants a node without gossip")
	}
	for to := 1; to <= 2; to++ {
		// The node announces the phase its own state machine applied, which the
		// linearizable advance has waited for: no retry needed.
		if code, msg := keyStep(t, a, "advance", nil); code != http.StatusOK {
			t.Fatalf("advance to %d = %d %s", to, code, msg)
		}
	}
	st := keyStatus(t, a)
	if st.Phase != 2 || len(st.Nodes) != 1 || st.Nodes[0].NodeID != "n1" || st.Nodes[0].Status != "ok" ||
		st.Nodes[0].Phase != 2 {
		t.Fatalf("status after two advances: phase %d nodes %+v (blocked: %q)", st.Phase, st.Nodes, st.NextBlocked)
	}
}
