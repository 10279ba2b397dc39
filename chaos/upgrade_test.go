//go:build upgrade

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// TestUpgradeRolling runs two real builds side by side (make upgrade-test): three nodes
// of the previous release (KEEL_OLD_BIN, schema widgets-v1) are replaced one at a time
// by this tree's build (KEEL_BIN, schema widgets-v2) under the chaos workload, every
// mixed state held under load — (new, old, old), (new, new, old), (new, new, new), as
// RFD 126's testing section asks — then one node is downgraded to the old release and
// upgraded again. The history is checked like any chaos run (linearizable, no
// acknowledged write lost, only retriable errors, every node's state), and each state
// is checked for what an upgrade must keep:
//
//   - continue tokens from an old node work on a new one and back;
//   - the command-format gate holds while any voter is old (a lease grant, command
//     format 3, is a 503 naming the format, nothing granted) and lifts once every voter
//     is new (a grant succeeds);
//   - once every node is new, the storage-version migration rewrites every widget into
//     v2 and ends Succeeded;
//   - an old node facing objects it cannot decode (v2) refuses readiness, naming the
//     resource and the version.
//
// It fails, never skips, when either binary is missing.
func TestUpgradeRolling(t *testing.T) {
	newBin, oldBin := os.Getenv("KEEL_BIN"), os.Getenv("KEEL_OLD_BIN")
	for name, b := range map[string]string{"KEEL_BIN": newBin, "KEEL_OLD_BIN": oldBin} {
		if b == "" {
			t.Fatalf("%s is not set: run make upgrade-test (it builds both releases)", name)
		}
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	root := moduleRoot(t)
	oldArgs := []string{"-schema", filepath.Join(root, "docs/examples/widgets-v1.yaml"), "-no-migrate"}
	newArgs := []string{"-schema", filepath.Join(root, "docs/examples/widgets-v2.yaml")}

	dir := t.TempDir()
	cfg := DefaultProcConfig()
	cfg.Bin, cfg.ExtraArgs, cfg.Dir, cfg.Subnet = oldBin, oldArgs, dir, 97
	cfg.Logf = t.Logf
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	c, err := StartProcCluster(sctx, cfg)
	cancel()
	if err != nil {
		t.Fatalf("start 3 nodes of the old release: %v", err)
	}
	defer c.Close()
	ids := c.Members()
	u := &upgrader{t: t, c: c, ids: ids, oldBin: oldBin, newBin: newBin, oldArgs: oldArgs, newArgs: newArgs,
		release: map[string]string{}}
	for _, id := range ids {
		u.release[id] = "old"
	}
	const widgets = 30
	u.seedWidgets(ctx, widgets)

	type step struct {
		name string
		hold time.Duration
		run  func(ctx context.Context) error
	}
	steps := []step{
		{"upgrade " + ids[0] + ": (new, old, old); leases (command format 3) refused", 6 * time.Second, func(ctx context.Context) error {
			if err := u.swap(ctx, ids[0], "new"); err != nil {
				return err
			}
			return u.leaseRefused(ctx, ids[0])
		}},
		{"upgrade " + ids[1] + ": (new, new, old); leases still refused", 6 * time.Second, func(ctx context.Context) error {
			if err := u.swap(ctx, ids[1], "new"); err != nil {
				return err
			}
			return u.leaseRefused(ctx, ids[1])
		}},
		{"upgrade " + ids[2] + ": (new, new, new), migration to v2 succeeds", 6 * time.Second, func(ctx context.Context) error {
			if err := u.swap(ctx, ids[2], "new"); err != nil {
				return err
			}
			return u.waitMigrated(ctx, widgets)
		}},
		{"downgrade " + ids[1] + " to the old release: it refuses readiness over v2 objects", 6 * time.Second, func(ctx context.Context) error {
			if err := u.client(ids[0]).SetMigrationSettings(ctx, api.MigrationSettings{Auto: false, Rate: 500}); err != nil {
				return fmt.Errorf("turn automatic migrations off: %w", err)
			}
			if err := u.swap(ctx, ids[1], "old"); err != nil {
				return err
			}
			return u.waitNotReady(ctx, ids[1], "widgets", "v2")
		}},
		{"upgrade " + ids[1] + " again: the format gate lifts, a lease is granted", 6 * time.Second, func(ctx context.Context) error {
			if err := u.swap(ctx, ids[1], "new"); err != nil {
				return err
			}
			if err := u.client(ids[0]).SetMigrationSettings(ctx, api.MigrationSettings{Auto: true, Rate: 500}); err != nil {
				return err
			}
			return u.leaseGranted(ctx, ids[2])
		}},
	}

	w := DefaultWorkload()
	w.Duration = 3*time.Minute + 10*time.Second
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	h := NewHistory()
	wctx, stopTraffic := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx, c, h, 20261123) }()

	var specs []FaultSpec
	var sch Schedule
	var events []FaultEvent
	var failed []string
	t0 := time.Now()
	time.Sleep(3 * time.Second) // traffic on the old release first
	for i, st := range steps {
		ev := FaultEvent{Start: h.Now(), Desc: st.name}
		ev.Step = Step{At: time.Since(t0), Kind: "release", Hold: st.hold, Spec: i}
		specs = append(specs, FaultSpec{Kind: "release", HoldMin: st.hold})
		sch.Steps = append(sch.Steps, ev.Step)
		t.Logf("step %d: %s", i+1, st.name)
		sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		err := st.run(sctx)
		cancel()
		if err != nil {
			ev.Err = err.Error()
			failed = append(failed, fmt.Sprintf("%s: %v", st.name, err))
			t.Errorf("step %d (%s): %v", i+1, st.name, err)
		}
		time.Sleep(st.hold) // the mixed state holds under load
		if err := u.checkTokensAcross(ctx); err != nil {
			failed = append(failed, fmt.Sprintf("%s: continue tokens: %v", st.name, err))
			t.Errorf("step %d (%s): continue tokens: %v", i+1, st.name, err)
		}
		ev.End = h.Now()
		events = append(events, ev)
	}
	time.Sleep(2 * time.Second)
	stopTraffic()
	if err := <-werr; err != nil && wctx.Err() == nil {
		t.Errorf("workload: %v", err)
	}

	problems, tl, nodes := afterFaults(ctx, c, h, w, t.Logf, false)
	rep, counts, checked := CheckRun(RunData{
		Records: h.Records(), Keys: append(append([]string(nil), w.Keys...), finalKey), Prefix: w.Prefix,
		Timeline: tl, Nodes: nodes, Specs: specs, Schedule: sch, Events: events,
	}, upgradeFloors(), 2*time.Minute)
	problems = append(problems, checked...)
	if err := u.waitMigrated(ctx, widgets); err != nil {
		problems = append(problems, "after the last upgrade: "+err.Error())
	}
	t.Logf("UPGRADE %s -> %s: steps=%d ops=%d acked_writes=%d lin_reads=%d min_ops_per_step=%d checked=%d unknown=%d nodes_checked=%d",
		filepath.Base(oldBin), filepath.Base(newBin), len(steps), rep.Records, counts.AckedWrites, counts.LinearizableReads,
		counts.MinOpsPerFault, rep.KeyOps, rep.Unknown, len(nodes))
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	for _, p := range problems {
		t.Errorf("problem: %s", p)
	}
	if t.Failed() {
		art := filepath.Join(ArtifactsRoot(), "upgrade-rolling")
		os.MkdirAll(art, 0o755)
		c.CollectLogs(art)
		h.WriteJSON(filepath.Join(art, "history.jsonl"))
		t.Logf("artifacts: %s", art)
	}
}

// upgrader swaps the releases of a ProcCluster's nodes and checks what each state keeps.
type upgrader struct {
	t                *testing.T
	c                *ProcCluster
	ids              []string
	oldBin, newBin   string
	oldArgs, newArgs []string
	release          map[string]string // node -> "old" | "new"
}

// client is a client of one node that retries briefly (these checks are not part of
// the recorded history).
func (u *upgrader) client(id string) *client.Client { return u.c.Client(id) }

// swap restarts id (SIGTERM, same data dir) on the given release and waits until it is
// back among the voters and the cluster has a leader.
func (u *upgrader) swap(ctx context.Context, id, release string) error {
	bin, args := u.newBin, u.newArgs
	if release == "old" {
		bin, args = u.oldBin, u.oldArgs
	}
	u.c.SetRelease(id, bin, args)
	if err := u.c.Restart(ctx, id); err != nil {
		return fmt.Errorf("restart %s on the %s release: %w", id, release, err)
	}
	u.release[id] = release
	if err := WaitVoters(ctx, u.c, u.ids); err != nil {
		return fmt.Errorf("after restarting %s: %w", id, err)
	}
	if _, err := WaitLeader(ctx, u.c); err != nil {
		return err
	}
	// The node is back: it answers status (on whatever release it reports).
	for {
		st, err := u.client(id).Status(ctx)
		if err == nil && st.AppliedIndex > 0 {
			u.t.Logf("%s runs the %s release (%s)", id, release, st.Release)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s never answered status after its restart: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// seedWidgets creates n widgets through the old release's typed API (stored in v1).
func (u *upgrader) seedWidgets(ctx context.Context, n int) {
	u.t.Helper()
	for i := range n {
		code, body := u.do(ctx, http.MethodPut, u.ids[0], fmt.Sprintf("/apis/apps/v1/widgets/w%02d", i),
			fmt.Sprintf(`{"spec":{"size":%d}}`, i+1))
		if code/100 != 2 {
			u.t.Fatalf("create widget %d: %d %s", i, code, body)
		}
	}
}

// leaseRefused checks that a lease grant through id is refused while an old voter is
// in the cluster (the old release cannot apply command format 3): 503 naming format 3,
// nothing granted.
func (u *upgrader) leaseRefused(ctx context.Context, id string) error {
	code, body := u.post(ctx, id, "/v1/leases", `{"ttl":30}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "format 3") {
		return fmt.Errorf("lease grant with an old voter: %d %s, want 503 naming command format 3", code, body)
	}
	code, body = u.get(ctx, id, "/v1/leases")
	if code != http.StatusOK || strings.Contains(body, `"id"`) {
		return fmt.Errorf("leases after a refused grant: %d %s, want none", code, body)
	}
	return nil
}

// leaseGranted waits until a lease grant through id succeeds (the gate lifts once every
// voter answered that it applies format 3), attaches a key and revokes the lease.
func (u *upgrader) leaseGranted(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		code, body := u.post(ctx, id, "/v1/leases", `{"ttl":30}`)
		last = fmt.Sprintf("%d %s", code, body)
		if code/100 == 2 {
			var g struct {
				ID int64 `json:"id"`
			}
			if err := json.Unmarshal([]byte(body), &g); err != nil || g.ID == 0 {
				return fmt.Errorf("grant answer %s: %v", body, err)
			}
			if code, body := u.do(ctx, http.MethodDelete, id, fmt.Sprintf("/v1/leases/%d", g.ID), ""); code != http.StatusOK {
				return fmt.Errorf("revoke lease %d: %d %s", g.ID, code, body)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lease grant once every node is new: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (u *upgrader) post(ctx context.Context, id, path, body string) (int, string) {
	return u.do(ctx, http.MethodPost, id, path, body)
}

func (u *upgrader) get(ctx context.Context, id, path string) (int, string) {
	return u.do(ctx, http.MethodGet, id, path, "")
}

func (u *upgrader) do(ctx context.Context, method, id, path, body string) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+u.c.HTTPAddr(id)+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitMigrated waits until the widgets migration has Succeeded with every object in v2.
func (u *upgrader) waitMigrated(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last string
	for {
		for _, id := range u.ids {
			if u.release[id] != "new" {
				continue
			}
			ms, err := u.client(id).Migrations(ctx)
			if err != nil {
				if last == "" {
					last = err.Error()
				}
				continue
			}
			for _, m := range ms {
				if !strings.Contains(m.Resource, "widgets") {
					continue
				}
				last = fmt.Sprintf("%s: state %s target %s migrated %d remaining %v", m.Resource, m.State, m.Target, m.Migrated, m.Remaining)
				if m.State == api.MigrationSucceeded && m.Target == "v2" && remainingZero(m.Remaining) {
					return u.checkWidgetsRead(ctx, id, n)
				}
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the widgets migration did not succeed: %s", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func remainingZero(m map[string]int64) bool {
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// checkWidgetsRead lists every widget through v2 on a new node: n objects, each with
// spec.replicas (renamed from v1's spec.size) and the defaulted color.
func (u *upgrader) checkWidgetsRead(ctx context.Context, id string, n int) error {
	code, body := u.get(ctx, id, "/apis/apps/v2/widgets")
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		return fmt.Errorf("list widgets through v2: %d %s: %v", code, body, err)
	}
	if len(list.Items) != n {
		return fmt.Errorf("%d widgets through v2, want %d", len(list.Items), n)
	}
	for _, it := range list.Items {
		spec, _ := it["spec"].(map[string]any)
		if spec["replicas"] == nil || spec["color"] != "blue" || spec["size"] != nil {
			return fmt.Errorf("widget through v2 = %v, want spec.replicas and color blue", it)
		}
	}
	return nil
}

// waitNotReady waits until id's /readyz refuses and its verbose answer names every
// word of want (the resource and the version it cannot decode).
func (u *upgrader) waitNotReady(ctx context.Context, id string, want ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		code, body := u.get(ctx, id, "/readyz?verbose")
		last = fmt.Sprintf("%d %s", code, body)
		if code == http.StatusServiceUnavailable && !slices.ContainsFunc(want, func(w string) bool {
			return !strings.Contains(body, w)
		}) {
			u.t.Logf("%s refuses readiness: %s", id, last)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s did not refuse readiness naming %v; last answer: %s", id, want, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkTokensAcross pages the workload's keys two at a time, each page from another
// node, across releases when the cluster is mixed, and compares with one full list at
// the scan's revision: a continue token from an old node works on a new one and back.
func (u *upgrader) checkTokensAcross(ctx context.Context) error {
	var order []string // alternate releases where both run
	var olds, news []string
	for _, id := range u.ids {
		if u.release[id] == "old" {
			olds = append(olds, id)
		} else {
			news = append(news, id)
		}
	}
	for i := 0; i < len(u.ids); i++ {
		if i < len(olds) {
			order = append(order, olds[i])
		}
		if i < len(news) {
			order = append(order, news[i])
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	first, err := u.client(order[0]).List(ctx, "k/", client.ListOptions{Limit: 2})
	if err != nil {
		return fmt.Errorf("first page from %s: %w", order[0], err)
	}
	got := append([]api.KV(nil), first.Items...)
	tok, rev := first.Continue, first.Revision
	for i := 1; tok != ""; i++ {
		node := order[i%len(order)]
		page, err := u.client(node).List(ctx, "k/", client.ListOptions{Limit: 2, Continue: tok})
		if err != nil {
			return fmt.Errorf("page %d from %s (%s release) with a token from %s: %w", i+1, node, u.release[node],
				order[(i-1)%len(order)], err)
		}
		if page.Revision != rev {
			return fmt.Errorf("page %d at revision %d, the scan is at %d", i+1, page.Revision, rev)
		}
		got = append(got, page.Items...)
		tok = page.Continue
	}
	full, err := u.client(order[len(order)-1]).List(ctx, "k/", client.ListOptions{Revision: rev})
	if err != nil {
		return fmt.Errorf("full list at %d: %w", rev, err)
	}
	if len(full.Items) != len(got) {
		return fmt.Errorf("paged scan across %v found %d keys, one list %d", order, len(got), len(full.Items))
	}
	for i := range got {
		if got[i].Key != full.Items[i].Key || got[i].ModRevision != full.Items[i].ModRevision {
			return fmt.Errorf("paged scan item %d = %s@%d, list has %s@%d", i, got[i].Key, got[i].ModRevision,
				full.Items[i].Key, full.Items[i].ModRevision)
		}
	}
	return nil
}

// moduleRoot walks up from the working directory to go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("no go.mod above the working directory")
		}
	}
}

// upgradeFloors are the default floors without watchers: the rolling upgrade runs the
// previous release, which may not serve watches.
func upgradeFloors() Floors {
	f := DefaultFloors()
	f.Watchers, f.WatchEvents = 0, 0
	return f
}
