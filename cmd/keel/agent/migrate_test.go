package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// TestMigrateAfterRollingUpgrade: three nodes on the v1 schema hold v1 objects; a
// rolling restart onto the v1+v2 schema (preferring v2) makes v2 the common encoding,
// and the leader's migrator rewrites every v1 object into v2 while clients keep
// updating some of them. At the end every object is stored in v2 — the state machine's
// exact counts say so — each with the content it should have: converted for the
// untouched ones, the client's last write for the updated ones, none lost or reverted.
func TestMigrateAfterRollingUpgrade(t *testing.T) {
	oldS, newS := loadTestSchema(t, "widgets-v1.yaml"), loadTestSchema(t, "widgets-v1v2.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	for i := range c.cfgs {
		c.cfgs[i] = withSchema(c.cfgs[i], oldS)
		c.cfgs[i].NoMigrate = false
		c.cfgs[i].Migrate = migrate.Config{Interval: 200 * time.Millisecond, Chunk: 25, Rate: 100}
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
	const n = 300
	for i := range c.agents {
		waitFor(t, fmt.Sprintf("%s registered", c.cfgs[i].NodeID), 20*time.Second, func() error {
			return c.agents[i].versions.Ready(context.Background())
		})
	}
	for i := range n {
		if code := putCodeThroughElections(t, c.agents[i%3], fmt.Sprintf("/apis/apps/v1/widgets/w-%d", i), fmt.Sprintf(`{"spec":{"size":%d}}`, i)); code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("put w-%d = %d", i, code)
		}
	}
	counts := func() map[string]int64 {
		view, err := c.agents[0].Node().View(context.Background(), fsm.Linearizable)
		if err != nil {
			t.Fatal(err)
		}
		return view.Encodings()
	}
	if got := counts()["apps/widgets/v1"]; got != n {
		t.Fatalf("%d objects stored in v1, want %d", got, n)
	}

	// Rolling upgrade, one node at a time, each back and registered before the next.
	for i := range c.agents {
		c.stop(i)
		c.cfgs[i].Schema = newS
		c.start(i)
		waitFor(t, fmt.Sprintf("%s back", c.cfgs[i].NodeID), 20*time.Second, func() error {
			return c.agents[i].versions.Ready(context.Background())
		})
	}

	migrations := func() (migrate.Status, error) {
		// Decoded only on a 200: a 503 during an election is an error body, for
		// waitFor to try again, not a reason to stop the test.
		var body json.RawMessage
		var list []migrate.Status
		code := apiCall(t, c.agents[1], "GET", "/v1/migrations", nil, &body)
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatalf("GET /v1/migrations: decode %s: %v", body, err)
			}
		}
		if code != http.StatusOK || len(list) != 1 {
			return migrate.Status{}, fmt.Errorf("GET /v1/migrations = %d %s", code, body)
		}
		return list[0], nil
	}
	waitFor(t, "migration running", 20*time.Second, func() error {
		st, err := migrations()
		if err == nil && st.State != migrate.StateRunning {
			err = fmt.Errorf("state %s (%s)", st.State, st.Message)
		}
		return err
	})
	// Clients update every sixth object, in v2, while the migration runs: objects the
	// scan has passed, and objects ahead of it, which the migrator must skip (they
	// changed since its scan revision) rather than overwrite with the old content.
	var wg sync.WaitGroup
	last := make([]int, n)
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; ; round++ {
				for i := 6 * w; i < len(last); i += 12 {
					select {
					case <-stop:
						return
					default:
					}
					body := fmt.Sprintf(`{"spec":{"replicas":%d}}`, 1000*round+i)
					// Sent again until acknowledged: a 504 or a lost answer leaves the write
					// unknown, and the check below wants each object's last write exactly.
					code := putCodeThroughElections(t, c.agents[(i+round)%3], fmt.Sprintf("/apis/apps/v2/widgets/w-%d", i), body)
					if code != http.StatusOK && code != http.StatusCreated {
						t.Errorf("update w-%d = %d", i, code)
						return
					}
					last[i] = 1000*round + i
				}
			}
		}()
	}
	var st migrate.Status
	waitFor(t, "migration succeeded", 60*time.Second, func() error {
		var err error
		if st, err = migrations(); err == nil && st.State != migrate.StateSucceeded {
			err = fmt.Errorf("state %s, remaining %v, migrated %d", st.State, st.Remaining, st.Migrated)
		}
		return err
	})
	close(stop)
	wg.Wait()
	t.Logf("migration: %+v", st)
	if st.Target != "v2" || st.Pass != 1 || st.Scanned != n || st.Migrated < n-n/6 || st.Skipped == 0 ||
		st.Migrated+st.Skipped != n || len(st.Poison) != 0 {
		t.Errorf("status %+v: want target v2, one pass over %d objects, each rewritten or skipped (some), no poison", st, n)
	}
	if got := counts(); got["apps/widgets/v1"] != 0 || got["apps/widgets/v2"] != n {
		t.Errorf("encoding counts after the migration %v, want all %d in v2", got, n)
	}

	// Every object: in v2, with the right content.
	view, err := c.agents[2].Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprintf("/registry/apps/widgets/w-%d", i)
		kv, err := view.Get([]byte(key), 0)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		want := i
		if last[i] != 0 {
			want = last[i]
		}
		if kv.Encoding != "apps/widgets/v2" || !bytes.Contains(kv.Value, []byte(fmt.Sprintf(`"replicas":%d`, want))) || bytes.Contains(kv.Value, []byte(`"size"`)) {
			t.Errorf("%s = %s (%s), want v2 with replicas %d", key, kv.Value, kv.Encoding, want)
		}
	}
	// The StorageState heartbeat agrees: v1 is no longer persisted, so it can be dropped.
	waitFor(t, "persisted = [v2]", 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ss, err := versions.ReadStorageState(ctx, c.agents[0].Node(), "apps/widgets")
		if err != nil || ss == nil {
			return fmt.Errorf("state %v, %v", ss, err)
		}
		if fmt.Sprint(ss.PersistedEncodingVersions) != "[v2]" {
			return errors.New(fmt.Sprint(ss.PersistedEncodingVersions))
		}
		return nil
	})
}

var _ migrate.Store = (*raft.Node)(nil)
