package versions

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
)

const gizmosYAML = `
  - group: apps
    name: gizmos
    prefix: /registry/apps/gizmos/
    preferredVersion: v1
    versions:
      - name: v1
        served: true
`

// widgetsYAML is widgets-v1v2.yaml's resource with a chosen prefix and preferred version.
func widgetsYAML(prefix, preferred string) string {
	return `
  - group: apps
    name: widgets
    prefix: ` + prefix + `
    preferredVersion: ` + preferred + `
    versions:
      - name: v1
        served: true
      - name: v2
        served: true
    conversions:
      - from: v1
        to: v2
        ops:
          - rename: {from: spec.size, to: spec.replicas}
`
}

func parse(t *testing.T, name, body string) *Schema {
	t.Helper()
	s, err := ParseSchema(name, []byte("resources:"+body))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestApplySchema: one node, one widget stored in v1 (tagged), then schemas applied in
// turn:
//
//	#0 widgets + gizmos         added gizmos: gated until every alive member registered
//	#1 widgets prefer v1        preferred switch, live
//	#2 gizmos only              refused: widgets has 1 object (unless force)
//	#3 widgets v2 only          refused: the stored v1 object would be unreadable
//	#4 widgets at a new prefix  refused: objects do not move
func TestApplySchema(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	var members = alive("n1", "n2")
	m := newManager(t, "n1", parse(t, "start.yaml", widgetsYAML("/registry/apps/widgets/", "v2")), store,
		func() []Member { return members() })
	m.Reconcile(ctx)
	res, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut,
		Key: []byte("/registry/apps/widgets/a"), Value: []byte(`{"apiVersion":"apps/v1"}`), Encoding: "apps/widgets/v1"}}}})
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}

	ch, err := m.ApplySchema(ctx, parse(t, "add.yaml", widgetsYAML("/registry/apps/widgets/", "v2")+gizmosYAML), false)
	if err != nil || strings.Join(ch.Added, ",") != "apps/gizmos" || len(ch.Removed) != 0 {
		t.Fatalf("#0: change %+v, err %v; want gizmos added", ch, err)
	}
	if _, err := m.WriteEncoding("apps/gizmos"); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("#0: before registration: %v, want ErrNotRegistered", err)
	}
	m.Reconcile(ctx)
	if _, err := m.WriteEncoding("apps/gizmos"); !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), "n2") {
		t.Fatalf("#0: n2 has not registered: %v, want ErrNotRegistered naming n2", err)
	}
	if err := m.ReadCheck("apps/gizmos"); !errors.Is(err, ErrNotRegistered) {
		t.Fatalf("#0: reads while gated: %v, want ErrNotRegistered", err)
	}
	if err := m.Ready(ctx); err != nil {
		t.Fatalf("#0: a gated resource must not make the node unready: %v", err)
	}
	members = alive("n1") // n2 left: every alive member has registered
	m.Reconcile(ctx)
	if enc, err := m.WriteEncoding("apps/gizmos"); err != nil || enc != "v1" {
		t.Fatalf("#0: after every member registered: %q, %v", enc, err)
	}

	if enc, _ := m.WriteEncoding("apps/widgets"); enc != "v2" {
		t.Fatalf("#1: before: writes %q, want v2", enc)
	}
	ch, err = m.ApplySchema(ctx, parse(t, "v1.yaml", widgetsYAML("/registry/apps/widgets/", "v1")+gizmosYAML), false)
	if err != nil || len(ch.Preferred) != 1 {
		t.Fatalf("#1: change %+v, err %v", ch, err)
	}
	m.Reconcile(ctx)
	if enc, _ := m.WriteEncoding("apps/widgets"); enc != "v1" {
		t.Fatalf("#1: after: writes %q, want v1", enc)
	}
	if e, _ := mustRead(t, m).Entry("n1"); e.EncodingVersion != "v1" {
		t.Errorf("#1: registered entry %+v, want encoding v1", e)
	}

	refused := []struct {
		name, body string
		force      bool
		want       string
	}{
		{"gizmos.yaml", gizmosYAML, false, "has 1 stored object(s)"},
		{"v2only.yaml", gizmosYAML + `
  - group: apps
    name: widgets
    prefix: /registry/apps/widgets/
    preferredVersion: v2
    versions:
      - name: v2
        served: true
`, true, "does not declare version v1 of apps/widgets, which 1 stored object(s) use"},
		{"moved.yaml", widgetsYAML("/registry/apps/widgets2/", "v1") + gizmosYAML, true, "changes the prefix"},
	}
	for i, tc := range refused {
		before := m.Schema()
		_, err := m.ApplySchema(ctx, parse(t, tc.name, tc.body), tc.force)
		if !errors.Is(err, ErrSchemaChange) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), tc.name) {
			t.Errorf("#%d: err = %v, want ErrSchemaChange naming %s and %q", i+2, err, tc.name, tc.want)
		}
		if m.Schema() != before {
			t.Errorf("#%d: a refused schema changed the node's schema", i+2)
		}
	}
	if _, err := m.ApplySchema(ctx, parse(t, "gizmos.yaml", gizmosYAML), true); err != nil {
		t.Fatalf("#2 with force: %v", err)
	}
	if _, err := m.WriteEncoding("apps/widgets"); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("#2 with force: widgets still served: %v", err)
	}
}

func mustRead(t *testing.T, m *Manager) *StorageVersion {
	t.Helper()
	sv, err := ReadStorageVersion(context.Background(), m.cfg.Store, "apps/widgets")
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

// follower is a store that never leads.
type follower struct{ Store }

func (follower) IsLeader() bool { return false }

// TestHeartbeatWithoutLeader: a node that does not lead still writes the StorageState
// of its resources once the record is due (the leader may lack them), and a report
// counts a write exactly at once, untagged objects included, before any heartbeat.
func TestHeartbeatWithoutLeader(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	m := newManager(t, "n2", mustSchema(t, "widgets-v1v2.yaml"), follower{store}, alive("n1", "n2"))
	r := m.Schema().Resources[0]
	for _, op := range []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(r.Prefix + "a"), Value: []byte(`{"apiVersion":"apps/v1"}`), Encoding: "apps/widgets/v1"},
		{Type: fsm.OpPut, Key: []byte(r.Prefix + "b"), Value: []byte(`{"apiVersion":"apps/v1"}`)},
	} {
		if res, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{op}}}); err != nil || res.Err != nil {
			t.Fatal(err, res.Err)
		}
	}
	rep, err := BuildReport(ctx, store, m, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Resources) != 1 || !rep.Resources[0].StorageState.Exact || rep.Resources[0].StoredObjects["v1"] != 2 {
		t.Fatalf("report before any heartbeat: %+v, want exact v1:2", rep.Resources)
	}
	if ok := CheckUpgrade(mustSchema(t, "widgets-v1v2.yaml"), rep); !ok[0].OK {
		t.Errorf("upgrade check before any heartbeat: %+v", ok)
	}
	m.Reconcile(ctx)
	ss, err := ReadStorageState(ctx, store, r.Key())
	if err != nil {
		t.Fatal(err)
	}
	if ss.LastHeartbeat.IsZero() || ss.ObjectCounts["v1"] != 2 || ss.Prefix != r.Prefix {
		t.Fatalf("record after a non-leader's round: %+v", ss)
	}
	// A node without the resource counts it exactly too, from the record's prefix.
	rep, err = BuildReport(ctx, store, nil, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Resources[0].StorageState.Exact || rep.Resources[0].StoredObjects["v1"] != 2 {
		t.Fatalf("report of a node without schema: %+v", rep.Resources[0])
	}
}
