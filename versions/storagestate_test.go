package versions

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
)

// TestStorageStateHashes: the StorageState carries the KEP's persisted storage version
// hashes, the same hash the discovery document serves (sha256 of the encoding tag, 8
// bytes, base64), beside the version names; and a record of the release before the
// hashes (names only) is read with the hashes filled in and rewritten with them by the
// next heartbeat.
//
// Kills: a state without the hashes, a hash other than discovery's, and a reader that
// leaves an old record's hashes empty.
func TestStorageStateHashes(t *testing.T) {
	store := openStore(t)
	m := newManager(t, "n1", mustSchema(t, "widgets-v1v2.yaml"), store, alive("n1"))
	r := m.Schema().Resources[0]
	m.Reconcile(context.Background())
	discovery := func(v string) string { // kv/resources Layer.Discovery
		sum := sha256.Sum256([]byte(EncodingTag(r.Key(), v)))
		return base64.StdEncoding.EncodeToString(sum[:8])
	}
	apply := func(ops ...fsm.Op) {
		t.Helper()
		res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}})
		if err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	apply(fsm.Op{Type: fsm.OpPut, Key: []byte(r.Prefix + "a"), Value: []byte(`{"apiVersion":"apps/v1"}`),
		Encoding: EncodingTag(r.Key(), "v1")})

	// The previous release's record: names only.
	old := `{"resource":"apps/widgets","persistedEncodingVersions":["v1","v2"],"currentEncodingVersion":"v2",` +
		`"objectCounts":{"v1":1},"observedRevision":3,"lastHeartbeat":"2020-01-01T00:00:00Z"}`
	apply(fsm.Op{Type: fsm.OpPut, Key: []byte(StorageStateKey(r.Key())), Value: []byte(old)})
	ss, err := ReadStorageState(context.Background(), store, r.Key())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{discovery("v1"), discovery("v2")}
	if !slices.Equal(ss.PersistedStorageVersionHashes, want) || ss.CurrentStorageVersionHash != discovery("v2") {
		t.Fatalf("old record read as hashes %v current %q, want %v current %q", ss.PersistedStorageVersionHashes,
			ss.CurrentStorageVersionHash, want, discovery("v2"))
	}
	if got := ss.StaleHashes(); !slices.Equal(got, []string{discovery("v1") + " (apps/v1)"}) {
		t.Errorf("stale hashes %v, want [%s (apps/v1)]", got, discovery("v1"))
	}

	// The heartbeat upgrades the record in place.
	if err := m.Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	kv, err := store.Store().View().Get([]byte(StorageStateKey(r.Key())), 0)
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		Hashes  []string `json:"persistedStorageVersionHashes"`
		Current string   `json:"currentStorageVersionHash"`
		Names   []string `json:"persistedEncodingVersions"`
	}
	if err := json.Unmarshal(kv.Value, &stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Hashes, want) || stored.Current != discovery("v2") || !slices.Equal(stored.Names, []string{"v1", "v2"}) {
		t.Fatalf("stored after the heartbeat: %s", kv.Value)
	}
	if h := StorageVersionHash(r.Key(), VersionUnknown); h != VersionUnknown {
		t.Errorf("hash of Unknown = %q, want %q (the KEP's)", h, VersionUnknown)
	}
}

// TestHeldBackNamesTheOldNode: when an old member (decoding v1 only) makes the others
// write v1 though they prefer v2, the manager says which member holds writes back — its
// node ID, release and decodable versions — and what to do, and the report carries it
// (what `keel versions` and the 409 Downgraded message show).
//
// Kills: a write filter that holds writes back without naming the member (the message
// blamed the stored version, "apps/v1, the version apps/widgets is stored in now").
func TestHeldBackNamesTheOldNode(t *testing.T) {
	store := openStore(t)
	members := func() []Member {
		return []Member{{ID: "n1", Alive: true, Release: "v1.2.0"}, {ID: "n2", Alive: true, Release: "85d08eb",
			Decodable: map[string][]string{"apps/widgets": {"v1"}}}}
	}
	n1 := newManager(t, "n1", mustSchema(t, "widgets-v1v2.yaml"), store, members)
	n2 := newManager(t, "n2", mustSchema(t, "widgets-v1.yaml"), store, members)
	n2.Reconcile(context.Background())
	n1.Reconcile(context.Background())
	if enc, err := n1.WriteEncoding("apps/widgets"); enc != "v1" || err != nil {
		t.Fatalf("n1 writes %q (%v), want v1 while n2 decodes only v1", enc, err)
	}
	held := n1.HeldBack("apps/widgets")
	for _, want := range []string{"node n2 (release 85d08eb, decodes v1)", "cannot decode v2", "upgrade that node",
		"remove it"} {
		if !strings.Contains(held, want) {
			t.Errorf("held back = %q, want it to contain %q", held, want)
		}
	}
	rep, err := BuildReport(context.Background(), store, n1, "n1")
	if err != nil || len(rep.Resources) != 1 || rep.Resources[0].HeldBack != held {
		t.Fatalf("report %+v %v, want heldBack %q", rep, err, held)
	}
	if h := n2.HeldBack("apps/widgets"); h != "" {
		t.Errorf("n2 writes its preferred version; held back = %q", h)
	}
}
