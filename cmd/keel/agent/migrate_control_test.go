package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/migrate"
)

// TestMigrationDriven drives a migration through the HTTP API of a real three-node
// cluster (no gossip) whose nodes all prefer v2 while 600 objects are stored in v1:
//
//	settings {auto:false}        nothing starts by itself
//	POST /v1/migrations           Running
//	DELETE .../apps/widgets       Aborted, checkpoint kept, nothing more rewritten
//	POST again                    Running from the checkpoint
//	leader killed (no handover)   the new leader resumes from the checkpoint
//	                              → Succeeded, one pass, 600 scanned, 600 rewritten
func TestMigrationDriven(t *testing.T) {
	s := loadTestSchema(t, "widgets-v1v2.yaml")
	dir := t.TempDir()
	c := &testCluster{t: t}
	for i := range 3 {
		cfg := withSchema(testConfig(t, dir, fmt.Sprintf("n%d", i+1)), s)
		cfg.Migrate = migrate.Config{Interval: 100 * time.Millisecond, Chunk: 20}
		if i == 0 {
			cfg.Raft.Bootstrap = true
		} else {
			cfg.Raft.Join = []string{c.cfgs[0].Raft.BindAddr}
		}
		c.cfgs = append(c.cfgs, cfg)
		c.agents = append(c.agents, nil)
		c.start(i)
		c.waitReady(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	for i := range c.agents {
		waitFor(t, "registered", 20*time.Second, func() error { return c.agents[i].versions.Ready(context.Background()) })
	}
	const n = 600
	leader := c.agents[c.leader()]
	for b := 0; b < n; b += 100 {
		var ops []fsm.Op
		for i := b; i < b+100; i++ {
			ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: []byte(fmt.Sprintf("/registry/apps/widgets/w%04d", i)),
				Value:    []byte(fmt.Sprintf(`{"apiVersion":"apps/v1","metadata":{"name":"w%04d"},"spec":{"size":%d}}`, i, i)),
				Encoding: "apps/widgets/v1"})
		}
		if res, err := leader.Node().Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}}); err != nil || res.Err != nil {
			t.Fatalf("seed: %v %v", err, res.Err)
		}
	}
	cli, err := client.New([]string{c.agents[0].HTTPAddr(), c.agents[1].HTTPAddr(), c.agents[2].HTTPAddr()},
		client.Options{MaxRetries: 30})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cli.SetMigrationSettings(ctx, api.MigrationSettings{Auto: false, Rate: 150}); err != nil {
		t.Fatal(err)
	}
	status := func() api.MigrationStatus {
		t.Helper()
		list, err := cli.Migrations(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("migrations: %+v %v", list, err)
		}
		return list[0]
	}
	time.Sleep(500 * time.Millisecond)
	if st := status(); st.State != migrate.StateWaiting || !strings.Contains(st.Message, "automatic migrations are off") {
		t.Fatalf("auto off: %+v", st)
	}
	if _, err := cli.AbortMigration(ctx, "apps/widgets"); !isReason(err, api.ReasonNotRunning) {
		t.Errorf("abort of nothing = %v, want 409 NotRunning", err)
	}
	if _, err := cli.StartMigration(ctx, "apps/nope"); !client.IsNotFound(err) {
		t.Errorf("start of an unknown resource = %v, want 404", err)
	}
	if _, err := cli.StartMigration(ctx, "apps/widgets"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running", 10*time.Second, func() error {
		if st := status(); st.State != migrate.StateRunning || st.PassScanned < 60 {
			return fmt.Errorf("%s %d", st.State, st.PassScanned)
		}
		return nil
	})
	// The abort's answer is the record it wrote: a status read right after it may come
	// from a member that has not applied the abort yet (a chunk more, under load).
	aborted, err := cli.AbortMigration(ctx, "apps/widgets")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if st := status(); st.State != migrate.StateAborted || st.Migrated != aborted.Migrated || len(st.NextKey) == 0 {
		t.Fatalf("after abort %+v (at abort: migrated %d)", st, aborted.Migrated)
	}
	if got := leader.Store().View().Encodings()["apps/widgets/v2"]; got != aborted.Migrated {
		t.Fatalf("%d objects in v2, the aborted record counts %d", got, aborted.Migrated)
	}
	if _, err := cli.StartMigration(ctx, "apps/widgets"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "resumed", 10*time.Second, func() error {
		if st := status(); st.State != migrate.StateRunning || st.Migrated < aborted.Migrated+60 {
			return fmt.Errorf("%s %d", st.State, st.Migrated)
		}
		return nil
	})
	// Kill the leader: raft stops without handing leadership over.
	li := c.leader()
	if err := c.agents[li].Node().Raft().Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	c.stop(li)
	killedAt := status()
	t.Logf("leader %s killed at %d/%d", c.cfgs[li].NodeID, killedAt.PassScanned, killedAt.Total)
	var st api.MigrationStatus
	waitFor(t, "succeeded under a new leader", 30*time.Second, func() error {
		if st = status(); st.State != migrate.StateSucceeded {
			return fmt.Errorf("%s %d/%d", st.State, st.PassScanned, st.Total)
		}
		return nil
	})
	if st.Pass != 1 || st.Scanned != n || st.Migrated != n || st.Skipped != 0 || killedAt.PassScanned >= n {
		t.Errorf("final %+v: want one pass, %d scanned and rewritten exactly once, none skipped", st, n)
	}
	if c, ok := st.Condition(api.ConditionSucceeded); !ok || c.Status != "True" {
		t.Errorf("conditions %+v", st.Conditions)
	}
	for i, a := range c.agents {
		if a == nil {
			continue
		}
		waitFor(t, "replicated", 5*time.Second, func() error {
			if enc := a.Store().View().Encodings(); enc["apps/widgets/v2"] != n || enc["apps/widgets/v1"] != 0 {
				return fmt.Errorf("node %d encodings %v", i, enc)
			}
			return nil
		})
		resp, err := http.Get("http://" + a.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`keel_migration_state{resource="apps/widgets",state="Succeeded"} 1`,
			fmt.Sprintf(`keel_migration_objects{count="rewritten",resource="apps/widgets"} %d`, n),
			`keel_migration_rate_limit 150`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("node %d /metrics lacks %s", i, want)
			}
		}
	}
}

func isReason(err error, reason string) bool {
	e, ok := err.(*client.Error)
	return ok && e.Reason == reason
}
