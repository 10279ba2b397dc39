package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// schemaWith is widgets-v1v2.yaml with the preferred version pref, plus gizmos when
// gizmos is set.
func schemaWith(t *testing.T, pref string, gizmos bool) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "versions", "testdata", "widgets-v1v2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "preferredVersion: v2", "preferredVersion: "+pref, 1)
	if gizmos {
		s += "  - group: apps\n    name: gizmos\n    prefix: /registry/apps/gizmos/\n    preferredVersion: v1\n" +
			"    versions:\n      - name: v1\n        served: true\n"
	}
	return s
}

// putSchema sends PUT /v1/agent/schema and returns the status and body.
func putSchema(t *testing.T, a *Agent, file, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", "http://"+a.HTTPAddr()+"/v1/agent/schema?file="+file, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSchemaAtRunTime applies schemas to a running three-node cluster (all start with
// widgets v1+v2, preferring v2):
//
//	bad schema on g1             400 FILE:LINE, nothing changed
//	gizmos added on g1, g2       gizmos 503 on g1 (g3 has not registered it)
//	gizmos added on g3 (Reload)  gizmos served on every node
//	widgets prefer v1 on all     writes stored in v1 at once, no restart
//	gizmos removed with objects  409 SchemaChangeRefused
func TestSchemaAtRunTime(t *testing.T) {
	s := loadTestSchema(t, "widgets-v1v2.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		c.add(3)
		c.cfgs[i] = withSchema(c.cfgs[i], s)
	}
	file := filepath.Join(t.TempDir(), "schema.yaml")
	if err := os.WriteFile(file, []byte(schemaWith(t, "v2", false)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.cfgs[2].SchemaFile = file
	for i := range 3 {
		c.start(i)
	}
	defer func() {
		for i := range c.agents {
			c.stop(i)
		}
	}()
	c.waitConfig("formed", 20*time.Second, func(v, _ []string) bool { return len(v) == 3 })
	waitFor(t, "registered", 20*time.Second, func() error {
		for _, a := range c.agents {
			if err := a.versions.Ready(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	g1, g2, g3 := c.agents[0], c.agents[1], c.agents[2]

	// A bad schema: refused with its line, nothing changed.
	before := g1.versions.Schema()
	bad := schemaWith(t, "v2", true) + "    colour: blue\n"
	line := strings.Count(bad, "\n")
	code, body := putSchema(t, g1, "bad.yaml", bad)
	if code != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf("bad.yaml:%d:", line)) ||
		!strings.Contains(body, api.ReasonBadSchema) {
		t.Fatalf("bad schema: %d %s, want 400 BadSchema at bad.yaml:%d", code, body, line)
	}
	if g1.versions.Schema() != before {
		t.Fatal("bad schema changed the node's schema")
	}

	// gizmos on g1 and g2 only: registered, not served.
	for _, a := range []*Agent{g1, g2} {
		if code, body := putSchema(t, a, "gizmos.yaml", schemaWith(t, "v2", true)); code != http.StatusOK ||
			!strings.Contains(body, `"added":["apps/gizmos"]`) {
			t.Fatalf("apply on %s: %d %s", a.NodeID(), code, body)
		}
	}
	waitFor(t, "gizmos registered by g1 and g2", 10*time.Second, func() error {
		sv, err := versions.ReadStorageVersion(context.Background(), g1.Node(), "apps/gizmos")
		if err != nil || len(sv.StorageVersions) != 2 {
			return fmt.Errorf("%v, %v", sv, err)
		}
		return nil
	})
	if code := putCode(g1, "/apis/apps/v1/gizmos/x", `{"spec":{}}`); code != http.StatusServiceUnavailable {
		t.Fatalf("gizmo while g3 has not registered: %d, want 503", code)
	}
	if code := apiCall(t, g3, "GET", "/apis/apps/v1/gizmos/x", nil, nil); code != http.StatusNotFound {
		t.Fatalf("g3 without gizmos: %d, want 404", code)
	}

	// SIGHUP's path on g3: its file now has gizmos.
	if err := os.WriteFile(file, []byte(schemaWith(t, "v2", true)), 0o644); err != nil {
		t.Fatal(err)
	}
	if ch, err := g3.Reload(context.Background()); err != nil || len(ch.Added) != 1 {
		t.Fatalf("reload g3: %+v, %v", ch, err)
	}
	waitFor(t, "gizmos served everywhere", 10*time.Second, func() error {
		for i, a := range c.agents {
			// 200 when an earlier round already created it (another node was not ready).
			if code := putCode(a, fmt.Sprintf("/apis/apps/v1/gizmos/x%d", i), `{"spec":{}}`); code != http.StatusCreated && code != http.StatusOK {
				return fmt.Errorf("%s: %d", a.NodeID(), code)
			}
		}
		return nil
	})

	// Preferred v2 → v1, live.
	if code := putCode(g1, "/apis/apps/v2/widgets/before", `{"spec":{"replicas":1}}`); code != http.StatusCreated {
		t.Fatalf("widget before: %d", code)
	}
	for _, a := range c.agents {
		if code, body := putSchema(t, a, "v1.yaml", schemaWith(t, "v1", true)); code != http.StatusOK ||
			!strings.Contains(body, "apps/widgets: v2 → v1") {
			t.Fatalf("prefer v1 on %s: %d %s", a.NodeID(), code, body)
		}
	}
	waitFor(t, "every node writes v1", 10*time.Second, func() error {
		encs, err := writeEncodings(c)
		if err != nil {
			return err
		}
		for id, e := range encs {
			if e != "v1" {
				return fmt.Errorf("%s writes %s", id, e)
			}
		}
		return nil
	})
	if code := putCode(g2, "/apis/apps/v2/widgets/after", `{"spec":{"replicas":1}}`); code != http.StatusCreated {
		t.Fatalf("widget after: %d", code)
	}
	view, err := g2.Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := view.Get([]byte("/registry/apps/widgets/after"), 0)
	if err != nil || kv.Encoding != "apps/widgets/v1" {
		t.Fatalf("widget written after the switch: tag %q, %v; want apps/widgets/v1", kv.Encoding, err)
	}

	// Removing gizmos, which has objects: refused, on the HTTP route as in Reload.
	code, body = putSchema(t, g1, "nogizmos.yaml", schemaWith(t, "v1", false))
	if code != http.StatusConflict || !strings.Contains(body, api.ReasonSchemaChangeRefused) ||
		!strings.Contains(body, "apps/gizmos") {
		t.Fatalf("remove gizmos: %d %s, want 409 naming apps/gizmos", code, body)
	}
	if err := os.WriteFile(file, []byte(schemaWith(t, "v1", false)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := g3.Reload(context.Background()); !errors.Is(err, versions.ErrSchemaChange) {
		t.Fatalf("reload removing gizmos: %v, want ErrSchemaChange", err)
	}
	if code := putCode(g3, "/apis/apps/v1/gizmos/x9", `{"spec":{}}`); code != http.StatusCreated {
		t.Fatalf("gizmos after a refused removal: %d, want still served", code)
	}
}

// TestResourceKnownToNonLeaderOnly: the leader (g1) has no schema; g2 and g3 serve
// widgets. StorageState is still kept fresh, `keel versions` (GET /v1/versions) counts
// a write exactly at once on any node, and the upgrade check does not dead-end.
func TestResourceKnownToNonLeaderOnly(t *testing.T) {
	s := loadTestSchema(t, "widgets-v1v2.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		c.add(3)
		if i > 0 {
			c.cfgs[i] = withSchema(c.cfgs[i], s)
		}
	}
	for i := range 3 {
		c.start(i)
	}
	defer func() {
		for i := range c.agents {
			c.stop(i)
		}
	}()
	c.waitConfig("formed", 20*time.Second, func(v, _ []string) bool { return len(v) == 3 })
	g1, g2 := c.agents[0], c.agents[1]
	g1Leads := func() error { return c.ledBy(g1) }
	waitFor(t, "g1 leads", 20*time.Second, g1Leads)
	waitFor(t, "g2 registered", 20*time.Second, func() error { return g2.versions.Ready(context.Background()) })
	for i := range 3 {
		// 503 (nothing written: a leader lost to a loaded machine) is retried as a
		// client does, once g1 leads again.
		waitFor(t, fmt.Sprintf("put w%d", i), 20*time.Second, func() error {
			code := apiCall(t, g2, "PUT", fmt.Sprintf("/apis/apps/v2/widgets/w%d", i), json.RawMessage(`{"spec":{"replicas":1}}`), nil)
			switch code {
			case http.StatusCreated:
				return nil
			case http.StatusServiceUnavailable:
				return errors.Join(fmt.Errorf("put w%d: 503", i), g1Leads())
			}
			t.Fatalf("put w%d: %d", i, code)
			return nil
		})
		var rep versions.Report
		if code := apiCall(t, g2, "GET", "/v1/versions", nil, &rep); code != http.StatusOK {
			t.Fatalf("versions: %d", code)
		}
		if n := rep.Resources[0].StoredObjects["v2"]; n != int64(i+1) || !rep.Resources[0].StorageState.Exact ||
			rep.Resources[0].StorageState.ObjectCounts["v2"] != int64(i+1) {
			t.Fatalf("right after write %d: stored %v, state %+v; want v2:%d exact", i, rep.Resources[0].StoredObjects,
				rep.Resources[0].StorageState, i+1)
		}
	}
	// The record is kept by a non-leader; the schema-less leader reads it exactly.
	// A leader that lost its quorum for a lease timeout (a loaded machine) is led
	// back to g1: the claim is about the records while g1 leads.
	waitFor(t, "StorageState fresh while g1 leads", 20*time.Second, func() error {
		if err := g1Leads(); err != nil {
			return err
		}
		ss, err := versions.ReadStorageState(context.Background(), g1.Node(), "apps/widgets")
		if err != nil || time.Since(ss.LastHeartbeat) > 2*time.Second || ss.ObjectCounts["v2"] != 3 {
			return fmt.Errorf("record %+v, %v", ss, err)
		}
		return nil
	})
	var rep versions.Report
	if code := apiCall(t, g1, "GET", "/v1/versions", nil, &rep); code != http.StatusOK {
		t.Fatalf("versions via g1: %d", code)
	}
	if !rep.Resources[0].StorageState.Exact || rep.Resources[0].StoredObjects["v2"] != 3 {
		t.Fatalf("versions via the schema-less leader: %+v", rep.Resources[0])
	}
	for _, f := range versions.CheckUpgrade(s, &rep) {
		if !f.OK {
			t.Errorf("upgrade check via g1: %+v", f)
		}
	}
}

// ledBy is nil once a leads the cluster and serves: it is leader, has applied its
// term's barrier (a linearizable read passes), knows that every voter applies the
// newest command format, and every node follows it. A transfer that has returned is
// not that yet: writes in between are 503 (no leader, or "format 2, every voter
// applies up to 1"). While another node leads, ledBy asks it to transfer to a.
func (c *gossipCluster) ledBy(a *Agent) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if !a.Node().IsLeader() {
		for _, o := range c.agents {
			if o.Node().IsLeader() {
				if err := o.Node().TransferLeadership(ctx, a.NodeID()); err != nil {
					return err
				}
				return fmt.Errorf("leadership transferred from %s", o.NodeID())
			}
		}
		return errors.New("no leader")
	}
	if _, err := a.Node().View(ctx, fsm.Linearizable); err != nil {
		return fmt.Errorf("%s not ready: %w", a.NodeID(), err)
	}
	if f := a.Node().CommandFormatLimit(); f < fsm.MaxCommandFormat {
		return fmt.Errorf("%s proposes command formats up to %d only, not yet %d", a.NodeID(), f, fsm.MaxCommandFormat)
	}
	for _, o := range c.agents {
		if st := o.Node().Status(); st.LeaderID != a.NodeID() || o.Node().LeaderContact() != nil {
			return fmt.Errorf("%s follows %q (contact: %v)", o.NodeID(), st.LeaderID, o.Node().LeaderContact())
		}
	}
	return nil
}
