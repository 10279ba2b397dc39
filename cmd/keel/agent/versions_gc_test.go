package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

func hasEntry(t *testing.T, a *Agent, node string) bool {
	_, ok := storageVersion(t, a).Entry(node)
	return ok
}

// TestVersionGCLeaveAndCrash: the entry of a node that leaves gracefully is gone
// within 2 s of its leave; the entry of a node that crashes goes once gossip has
// declared it dead and GCAfter (2 s here) has passed — not before.
func TestVersionGCLeaveAndCrash(t *testing.T) {
	s := loadTestSchema(t, "widgets-v1.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	c.add(0)
	for i := range c.cfgs {
		c.cfgs[i] = withSchema(c.cfgs[i], s)
		c.start(i)
	}
	defer func() {
		for i := range c.agents {
			c.stop(i)
		}
	}()
	c.waitConfig("formed", 20*time.Second, func(v, _ []string) bool { return len(v) == 3 })
	waitFor(t, "g4 registered", 20*time.Second, func() error {
		if !hasEntry(t, c.agents[0], "g4") {
			return errors.New("no entry")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.agents[3].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	c.stop(3)
	waitFor(t, "g4 entry removed after its leave", 10*time.Second, func() error {
		if hasEntry(t, c.agents[0], "g4") {
			return errors.New("still there")
		}
		return nil
	})
	if d := time.Since(left); d > 2*time.Second {
		t.Errorf("entry of a node that left removed after %v, want within 2s", d)
	}

	i5 := c.add(0)
	c.cfgs[i5] = withSchema(c.cfgs[i5], s)
	c.start(i5)
	waitFor(t, "g5 registered", 20*time.Second, func() error {
		if !hasEntry(t, c.agents[0], "g5") {
			return errors.New("no entry")
		}
		return nil
	})
	c.stop(i5) // no leave: peers declare it dead
	crashed := time.Now()
	var declared time.Time
	waitFor(t, "g5 entry removed after its crash", 20*time.Second, func() error {
		for _, m := range c.agents[0].Members() {
			if m.ID() == "g5" && m.Gone() && declared.IsZero() {
				declared = m.LastChange
			}
		}
		if hasEntry(t, c.agents[0], "g5") {
			return errors.New("still there")
		}
		return nil
	})
	gcAfter := c.cfgs[0].Versions.GCAfter
	took := time.Since(crashed)
	t.Logf("crash: declared dead after %v, entry removed after %v", declared.Sub(crashed), took)
	if declared.IsZero() || took < gcAfter {
		t.Errorf("entry removed %v after the crash (declared dead at %v): want no sooner than GCAfter %v", took, declared, gcAfter)
	}
	if limit := declared.Sub(crashed) + gcAfter + 1500*time.Millisecond; took > limit {
		t.Errorf("entry removed %v after the crash, want within dead detection + GCAfter (+1.5s) = %v", took, limit)
	}
}

// TestVersionGCUnservedResource: a node restarted with a schema without the
// resource loses its entry; once no node serves it, its StorageVersion record — and
// its StorageState, nothing being stored — are deleted.
func TestVersionGCUnservedResource(t *testing.T) {
	widgets := loadTestSchema(t, "widgets-v1.yaml")
	file := filepath.Join(t.TempDir(), "gadgets.yaml")
	if err := os.WriteFile(file, []byte(`resources:
  - group: apps
    name: gadgets
    prefix: /registry/apps/gadgets/
    preferredVersion: v1
    versions:
      - name: v1
        served: true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	gadgets, err := versions.LoadSchema(file)
	if err != nil {
		t.Fatal(err)
	}
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	for i := range c.cfgs {
		c.cfgs[i] = withSchema(c.cfgs[i], widgets)
		c.start(i)
	}
	defer func() {
		for i := range c.agents {
			c.stop(i)
		}
	}()
	c.waitConfig("formed", 20*time.Second, func(v, _ []string) bool { return len(v) == 3 })
	waitFor(t, "3 entries and a StorageState", 20*time.Second, func() error {
		if n := len(storageVersion(t, c.agents[0]).StorageVersions); n != 3 {
			return fmt.Errorf("%d entries", n)
		}
		if _, err := c.agents[0].Store().View().Get([]byte(versions.StorageStateKey("apps/widgets")), 0); err != nil {
			return err
		}
		return nil
	})
	restart := func(i int) {
		c.stop(i)
		c.cfgs[i].Schema = gadgets
		c.start(i)
		waitFor(t, c.cfgs[i].NodeID+" registered", 20*time.Second, func() error {
			return c.agents[i].versions.Ready(context.Background())
		})
	}
	restart(2)
	waitFor(t, "g3's widgets entry removed", 10*time.Second, func() error {
		sv := storageVersion(t, c.agents[0])
		if _, ok := sv.Entry("g3"); ok || len(sv.StorageVersions) != 2 {
			return fmt.Errorf("entries %+v", sv.StorageVersions)
		}
		return nil
	})
	restart(0)
	restart(1)
	waitFor(t, "widgets records deleted", 15*time.Second, func() error {
		view := c.agents[2].Store().View()
		for _, key := range []string{versions.StorageVersionKey("apps/widgets"), versions.StorageStateKey("apps/widgets")} {
			if _, err := view.Get([]byte(key), 0); !errors.Is(err, fsm.ErrKeyNotFound) {
				return fmt.Errorf("%q still there (%v)", key, err)
			}
		}
		return nil
	})
	if sv, _ := versions.ReadStorageVersion(context.Background(), c.agents[2].Node(), "apps/gadgets"); len(sv.StorageVersions) != 3 {
		t.Errorf("gadgets entries %+v, want 3", sv.StorageVersions)
	}
}
