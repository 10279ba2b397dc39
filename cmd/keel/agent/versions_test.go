package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

func loadTestSchema(t *testing.T, name string) *versions.Schema {
	t.Helper()
	s, err := versions.LoadSchema(filepath.Join("..", "..", "..", "versions", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withSchema gives cfg a schema and fast storage-version loops. The migrator is off:
// these tests watch old-version objects stay put (migrate_test.go turns it on).
func withSchema(cfg Config, s *versions.Schema) Config {
	cfg.Schema = s
	cfg.Versions = versions.Config{Interval: 200 * time.Millisecond, GCAfter: 2 * time.Second,
		HeartbeatInterval: 300 * time.Millisecond}
	cfg.NoMigrate = true
	return cfg
}

// apiCall sends an HTTP request to a and decodes the JSON answer into out (if non-nil).
func apiCall(t *testing.T, a *Agent, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+a.HTTPAddr()+path, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s → %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp.StatusCode
}

// putCode PUTs body and returns the status, 0 when the request failed in transport.
func putCode(a *Agent, path, body string) int {
	req, _ := http.NewRequest("PUT", "http://"+a.HTTPAddr()+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// putCodeThroughElections is putCode sent again, as a client would, while the answer
// says a leadership change refused it (503) or left it unknown (504), or no answer
// came, for up to 15 s: on a loaded machine the test clusters' 300 ms heartbeats see
// elections, and the tests check the data, not that none happened. A put retried
// after an unknown outcome may answer 200 (replaced) where the first would have
// answered 201.
func putCodeThroughElections(t *testing.T, a *Agent, path, body string) int {
	deadline := time.Now().Add(15 * time.Second)
	for {
		code := putCode(a, path, body)
		if (code != 0 && code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout) || time.Now().After(deadline) {
			return code
		}
		t.Logf("put %s = %d; again (a leadership change under load)", path, code)
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func storageVersion(t *testing.T, a *Agent) *versions.StorageVersion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sv, err := versions.ReadStorageVersion(ctx, a.Node(), "apps/widgets")
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

func writeEncodings(c *gossipCluster) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range c.agents {
		if a == nil {
			continue
		}
		enc, err := a.versions.WriteEncoding("apps/widgets")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.NodeID(), err)
		}
		out[a.NodeID()] = enc
	}
	return out, nil
}

// TestMixedSchemaCluster runs the rolling upgrade of KEP-2339 on three real nodes:
//
//	g1 old (v1)       g2, g3 new (v1+v2, prefer v2)   → common unset, everyone writes v1
//	g1 upgraded       all new                          → common v2, everyone writes v2
//	g4 v2-only joins  v1 objects still stored          → g4 never ready; upgrade check says no
//	g4 killed         its entry GC'd after GCAfter     → agreement recomputed over g1..g3
func TestMixedSchemaCluster(t *testing.T) {
	oldS, newS, v2only := loadTestSchema(t, "widgets-v1.yaml"), loadTestSchema(t, "widgets-v1v2.yaml"),
		loadTestSchema(t, "widgets-v2only.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	c.cfgs[0] = withSchema(c.cfgs[0], oldS)
	c.cfgs[1] = withSchema(c.cfgs[1], newS)
	c.cfgs[2] = withSchema(c.cfgs[2], newS)
	for i := range 3 {
		c.start(i)
	}
	defer func() {
		for i := range c.agents {
			c.stop(i)
		}
	}()
	c.waitConfig("formed", 20*time.Second, func(v, _ []string) bool { return len(v) == 3 })

	// Mixed: every node registered, the common version unset, new nodes write v1.
	waitFor(t, "mixed registration", 20*time.Second, func() error {
		encs, err := writeEncodings(c)
		if err != nil {
			return err
		}
		if len(storageVersion(t, c.agents[0]).StorageVersions) != 3 {
			return errors.New("not 3 entries yet")
		}
		for id, e := range encs {
			if e != "v1" {
				return fmt.Errorf("%s writes %s", id, e)
			}
		}
		return nil
	})
	sv := storageVersion(t, c.agents[1])
	if sv.CommonEncodingVersion != "" {
		t.Errorf("mixed: common = %q, want unset", sv.CommonEncodingVersion)
	}
	if cond, _ := sv.Condition(versions.ConditionAllEncodingVersionsEqual); cond.Status != "False" {
		t.Errorf("mixed: condition = %+v, want False", cond)
	}
	// A write through a new node in the v2 API is stored in v1; the old node reads it.
	// Until the leader has heard every voter's command format (just after the cluster
	// forms) such a write is a retryable 503; it is served once it has.
	var obj map[string]any
	waitFor(t, "put a via g2", 20*time.Second, func() error {
		if code := apiCall(t, c.agents[1], "PUT", "/apis/apps/v2/widgets/a",
			map[string]any{"spec": map[string]any{"replicas": 3}}, &obj); code != http.StatusCreated {
			return fmt.Errorf("put a via g2 = %d", code)
		}
		return nil
	})
	view, err := c.agents[1].Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := view.Get([]byte("/registry/apps/widgets/a"), 0)
	if err != nil || kv.Encoding != "apps/widgets/v1" || !strings.Contains(string(kv.Value), `"size":3`) {
		t.Fatalf("stored a = %s (%q), %v; want v1 with spec.size", kv.Value, kv.Encoding, err)
	}
	waitFor(t, "old node reads a", 5*time.Second, func() error {
		var got map[string]any
		if code := apiCall(t, c.agents[0], "GET", "/apis/apps/v1/widgets/a", nil, &got); code != 200 {
			return fmt.Errorf("status %d", code)
		}
		if spec := got["spec"].(map[string]any); spec["size"] != float64(3) {
			return fmt.Errorf("got %v", got)
		}
		return nil
	})
	// Bad objects are refused and change nothing.
	rev := c.agents[1].Store().Revision()
	for i, bad := range []any{"not an object", map[string]any{"apiVersion": "apps/v1"},
		map[string]any{"metadata": map[string]any{"name": "other"}}, map[string]any{"metadata": map[string]any{"revision": "x"}},
		map[string]any{"spec": map[string]any{"replicas": 1, "size": 2}}} {
		if code := apiCall(t, c.agents[1], "PUT", "/apis/apps/v2/widgets/a", bad, nil); code != http.StatusBadRequest {
			t.Errorf("#%d: bad object → %d, want 400", i, code)
		}
	}
	if code := apiCall(t, c.agents[1], "PUT", "/apis/apps/v2/widgets/Bad_Name", map[string]any{}, nil); code != http.StatusBadRequest {
		t.Errorf("bad name → %d, want 400", code)
	}
	if code := apiCall(t, c.agents[0], "GET", "/apis/apps/v2/widgets/a", nil, nil); code != http.StatusNotFound {
		t.Errorf("old node serving v2 → %d, want 404", code)
	}
	if got := c.agents[1].Store().Revision(); got != rev {
		t.Errorf("bad requests moved the revision %d → %d", rev, got)
	}
	// A stale revision is a conflict.
	if code := apiCall(t, c.agents[2], "PUT", "/apis/apps/v2/widgets/a",
		map[string]any{"metadata": map[string]any{"revision": 1}, "spec": map[string]any{"replicas": 4}}, nil); code != http.StatusConflict {
		t.Errorf("stale revision → %d, want 409", code)
	}

	// The write filter under a race: g1 (old schema) restarts while g2 and g3 write.
	// Every write is acknowledged or refused retriably, and every stored object is in
	// v1, which g1 decodes, whatever moment it came back.
	var wg sync.WaitGroup
	stopWriters := make(chan struct{})
	codes := make([]map[int]int, 2)
	for w := range 2 {
		codes[w] = map[int]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 2000; n++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				body := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
				codes[w][putCode(c.agents[w+1], fmt.Sprintf("/apis/apps/v2/widgets/race-%d-%d", w, n), body)]++
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	c.stop(0)
	c.start(0)
	waitFor(t, "g1 back and registered", 20*time.Second, func() error { return c.agents[0].versions.Ready(context.Background()) })
	time.Sleep(300 * time.Millisecond)
	close(stopWriters)
	wg.Wait()
	for w, m := range codes {
		for code := range m {
			if code != http.StatusCreated && code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout {
				t.Errorf("writer %d: status %d (%v), want only 201 or retriable 503/504", w, code, m)
			}
		}
		if m[http.StatusCreated] == 0 {
			t.Errorf("writer %d: no write succeeded: %v", w, m)
		}
	}
	view, err = c.agents[1].Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kvs, _, err := view.Range([]byte("/registry/apps/widgets/"), []byte("/registry/apps/widgets0"), 0, 0)
	if err != nil {
		t.Fatalf("range widgets: %v", err)
	}
	if len(kvs) == 0 {
		t.Fatal("no widget stored: the encoding check below would check nothing")
	}
	for _, kv := range kvs {
		if kv.Encoding != "apps/widgets/v1" {
			t.Fatalf("%s stored as %q while g1 decodes only v1", kv.Key, kv.Encoding)
		}
	}
	t.Logf("race: %d objects, all v1; writer statuses %v", len(kvs), codes)

	// Upgrade g1: restart it with the new schema. Then all nodes prefer v2, decode v2,
	// and switch; the common version is v2.
	c.stop(0)
	c.cfgs[0] = withSchema(c.cfgs[0], newS)
	c.start(0)
	waitFor(t, "upgraded agreement", 30*time.Second, func() error {
		encs, err := writeEncodings(c)
		if err != nil {
			return err
		}
		for id, e := range encs {
			if e != "v2" {
				return fmt.Errorf("%s writes %s", id, e)
			}
		}
		if sv := storageVersion(t, c.agents[0]); sv.CommonEncodingVersion != "v2" {
			return fmt.Errorf("common %q entries %+v", sv.CommonEncodingVersion, sv.StorageVersions)
		}
		return nil
	})
	if code := apiCall(t, c.agents[0], "PUT", "/apis/apps/v1/widgets/b",
		map[string]any{"spec": map[string]any{"size": 5}}, nil); code != http.StatusCreated {
		t.Fatalf("put b via upgraded g1 = %d", code)
	}
	view, err = c.agents[0].Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kv, _ = view.Get([]byte("/registry/apps/widgets/b"), 0)
	if kv.Encoding != "apps/widgets/v2" || !strings.Contains(string(kv.Value), `"replicas":5`) {
		t.Fatalf("stored b = %s (%q); want v2 with spec.replicas", kv.Value, kv.Encoding)
	}
	var ss *versions.StorageState
	waitFor(t, "storage state", 10*time.Second, func() error {
		var err error
		ss, err = versions.ReadStorageState(context.Background(), c.agents[1].Node(), "apps/widgets")
		if err != nil {
			return err
		}
		if !slices.Equal(ss.PersistedEncodingVersions, []string{"v1", "v2"}) || ss.ObjectCounts["v1"] != int64(len(kvs)) || ss.ObjectCounts["v2"] != 1 {
			return fmt.Errorf("storage state %+v", ss)
		}
		return nil
	})

	// A v2-only node is refused while a v1 object persists, and upgrade check says so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := versions.BuildReport(ctx, c.agents[1].Node(), c.agents[1].versions, "g2")
	if err != nil {
		t.Fatal(err)
	}
	findings := versions.CheckUpgrade(v2only, rep)
	if len(findings) == 0 || findings[0].OK || !strings.Contains(findings[0].Message, "version v1") {
		t.Errorf("upgrade check v2-only: %+v, want refused naming v1", findings)
	}
	for _, f := range versions.CheckUpgrade(newS, rep) {
		if !f.OK {
			t.Errorf("upgrade check v1+v2: %+v, want ok", f)
		}
	}
	i4 := c.add(0)
	c.cfgs[i4] = withSchema(c.cfgs[i4], v2only)
	c.start(i4)
	g4 := c.agents[i4]
	waitFor(t, "g4 registered but unready", 20*time.Second, func() error {
		if _, ok := storageVersion(t, c.agents[1]).Entry("g4"); !ok {
			return errors.New("g4 not registered")
		}
		err := g4.versions.Ready(ctx)
		if err == nil || !strings.Contains(err.Error(), "apps/widgets") || !strings.Contains(err.Error(), "v1") {
			return fmt.Errorf("g4 ready = %v", err)
		}
		return nil
	})
	if code := apiCall(t, g4, "GET", "/readyz", nil, nil); code != http.StatusServiceUnavailable {
		t.Errorf("g4 /readyz = %d, want 503", code)
	}
	if code := apiCall(t, g4, "PUT", "/apis/apps/v2/widgets/c", map[string]any{}, nil); code != http.StatusServiceUnavailable {
		t.Errorf("g4 write = %d, want 503", code)
	}

	// /metrics exports the exact object counts and what each node writes.
	resp, err := http.Get("http://" + c.agents[1].HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`keel_storage_objects{resource="apps/widgets",version="v1"} %d`, len(kvs)),
		`keel_storage_objects{resource="apps/widgets",version="v2"} 1`,
		`keel_storage_version_writing{resource="apps/widgets",version="v2"} 1`,
		`keel_storage_version_registered{resource="apps/widgets"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Kill g4: its entry is removed once gossip has declared it dead for GCAfter.
	c.stop(i4)
	waitFor(t, "g4 entry collected", 30*time.Second, func() error {
		sv := storageVersion(t, c.agents[1])
		if _, ok := sv.Entry("g4"); ok {
			return errors.New("g4 entry still present")
		}
		if sv.CommonEncodingVersion != "v2" || len(sv.StorageVersions) != 3 {
			return fmt.Errorf("after gc: common %q, %d entries", sv.CommonEncodingVersion, len(sv.StorageVersions))
		}
		return nil
	})
}

// TestCommandFormatGate: a voter that applies only command format 1 (an older
// release) keeps tagged writes out of the log; untagged KV writes go on.
func TestCommandFormatGate(t *testing.T) {
	c := &gossipCluster{t: t, dir: t.TempDir()}
	c.add(1)
	c.cfgs[0] = withSchema(c.cfgs[0], loadTestSchema(t, "widgets-v1v2.yaml"))
	c.cfgs[0].MaxCommandFormat = 1
	c.cfgs[0].Gossip.RetryJoin = false
	c.cfgs[0].Autopilot.MinQuorum = 1
	c.start(0)
	defer c.stop(0)
	a := c.agents[0]
	waitFor(t, "registered", 20*time.Second, func() error { return a.versions.Ready(context.Background()) })
	if code := apiCall(t, a, "PUT", "/apis/apps/v2/widgets/a", map[string]any{}, nil); code != http.StatusServiceUnavailable {
		t.Errorf("tagged write with a format-1 voter = %d, want 503", code)
	}
	if code := apiCall(t, a, "PUT", "/v1/kv/plain", "x", nil); code != http.StatusOK {
		t.Errorf("untagged write = %d, want 200", code)
	}
	if code := apiCall(t, a, "PUT", "/v1/kv/%00keel/storageversions/x", "x", nil); code != http.StatusForbidden {
		t.Errorf("write of a system key = %d, want 403 ReservedPrefix", code)
	}
}
