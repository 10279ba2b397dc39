package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/migrate"
)

const keyMig = "widgets-v2-keys"

// typedWriters write and read widgets through the typed API of every node while a key
// migration walks, each object owned by one writer, and check that every read returns
// the object's last acknowledged write, whichever key holds it.
type typedWriters struct {
	t      *testing.T
	c      *gossipCluster
	mu     sync.Mutex
	last   map[string]int // name → last acknowledged spec.size; -1: deleted
	errs   []string
	ops    int
	stop   chan struct{}
	done   sync.WaitGroup
	client *http.Client
	// addrs are the HTTP addresses of the running agents ("" while one is down), set by
	// the test goroutine (refresh) and read by the writers.
	addrMu sync.Mutex
	addrs  []string
}

// refresh records the HTTP addresses of the running agents; call it from the test
// goroutine after every stop and start.
func (w *typedWriters) refresh() {
	addrs := make([]string, len(w.c.agents))
	for i, a := range w.c.agents {
		if a != nil {
			addrs[i] = a.HTTPAddr()
		}
	}
	w.addrMu.Lock()
	w.addrs = addrs
	w.addrMu.Unlock()
}

func (w *typedWriters) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) < 20 {
		w.errs = append(w.errs, fmt.Sprintf(format, args...))
	}
}

// agentAt returns the address of a running agent, preferring i ("" when none runs).
func (w *typedWriters) agentAt(i int) string {
	w.addrMu.Lock()
	defer w.addrMu.Unlock()
	for j := range w.addrs {
		if a := w.addrs[(i+j)%len(w.addrs)]; a != "" {
			return a
		}
	}
	return ""
}

func (w *typedWriters) do(addr, method, path, body string) (int, []byte) {
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// run starts one writer per group of objects: put, read back, now and then delete and
// read back the 404. An unacknowledged write (an error, a node down) leaves the
// object's state unknown until the next acknowledged one.
func (w *typedWriters) run(writers, perWriter int) {
	for g := range writers {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				name := fmt.Sprintf("w-%d-%d", g, n%perWriter)
				a := w.agentAt(g + n)
				if a == "" {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				path := "/apis/apps/v1/widgets/" + name
				if n%7 == 3 {
					code, _ := w.do(a, "DELETE", path, "")
					if code == http.StatusOK || code == http.StatusNotFound {
						w.ack(name, -1)
						w.check(a, name)
					} else {
						w.unknown(name)
					}
					continue
				}
				code, _ := w.do(a, "PUT", path, fmt.Sprintf(`{"spec":{"size":%d}}`, n))
				if code == http.StatusOK || code == http.StatusCreated {
					w.ack(name, n)
					w.check(a, name)
				} else {
					w.unknown(name)
				}
			}
		}()
	}
}

func (w *typedWriters) ack(name string, v int) {
	w.mu.Lock()
	w.last[name] = v
	w.ops++
	w.mu.Unlock()
}

// unknown forgets what an object holds: an unacknowledged write may or may not land.
func (w *typedWriters) unknown(name string) {
	w.mu.Lock()
	delete(w.last, name)
	w.mu.Unlock()
}

// check reads name back (linearizable) and compares it with its last acknowledged write.
func (w *typedWriters) check(a string, name string) {
	w.mu.Lock()
	want, known := w.last[name]
	w.mu.Unlock()
	if !known {
		return
	}
	code, body := w.do(a, "GET", "/apis/apps/v1/widgets/"+name, "")
	switch {
	case code == 0 || code == http.StatusServiceUnavailable:
	case want == -1 && code != http.StatusNotFound:
		w.fail("%s: read %d %s after an acknowledged delete", name, code, body)
	case want >= 0 && code != http.StatusOK:
		w.fail("%s: read %d %s after an acknowledged write of %d", name, code, body, want)
	case want >= 0:
		if got := sizeOf(body); got != want {
			w.fail("%s: read size %d, last acknowledged write %d", name, got, want)
		}
	}
}

func sizeOf(body []byte) int {
	var obj struct {
		Spec struct {
			Size *int `json:"size"`
		} `json:"spec"`
	}
	if json.Unmarshal(body, &obj) != nil || obj.Spec.Size == nil {
		return -2
	}
	return *obj.Spec.Size
}

func (w *typedWriters) halt() {
	close(w.stop)
	w.done.Wait()
}

// keyStep posts an advance or rollback to a and returns the status and the error
// reason.
func keyStep(t *testing.T, a *Agent, step string, to *int) (int, string) {
	t.Helper()
	var e struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	code := apiCall(t, a, "POST", api.PathKeyMigrations+"/"+keyMig+"/"+step, api.KeyMigrationRequest{To: to, By: "test"}, &e)
	return code, e.Reason + ": " + e.Message
}

// keyStepThroughElections is keyStep asked again for up to 15 s while a answers 503:
// nothing was applied (no leader to check the phase record against). For steps the
// test expects refused, so a 504 (outcome unknown) cannot arise from them.
func keyStepThroughElections(t *testing.T, a *Agent, step string, to *int) (int, string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, why := keyStep(t, a, step, to)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, why
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keyStatus reads the key migration's status on a, asking again for up to 15 s while a
// answers 503: the status is a linearizable read, refused while a has no leader, and
// the test clusters' 300 ms heartbeats see elections on a loaded machine.
func keyStatus(t *testing.T, a *Agent) api.KeyMigrationStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var st api.KeyMigrationStatus
		code := apiCall(t, a, "GET", api.PathKeyMigrations+"/"+keyMig, nil, &st)
		if code == http.StatusOK {
			return st
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("GET key migration = %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rollbackTo posts a rollback to phase to and fails the test unless it is taken. An
// answer other than 200 is fine when the status shows that the rollback landed (phase
// to, or phase 4 rolling back to to): a 504 leaves the outcome unknown and the entry
// may commit after the answer, so a retry can be refused because it did. A 503 or 504
// (a leadership change under load) is otherwise retried for up to 15 s.
func (c *gossipCluster) rollbackTo(to int) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, why := keyStep(c.t, c.anyAgent(), "rollback", &to)
		if code == http.StatusOK {
			return
		}
		st := keyStatus(c.t, c.anyAgent())
		if st.Phase == to || (st.RollbackTo != nil && *st.RollbackTo == to) {
			return
		}
		if (code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout) || time.Now().After(deadline) {
			c.t.Fatalf("rollback to %d = %d %s", to, code, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// advanceTo advances to phase `to` once the cluster allows it (members catching up,
// the copy finishing), failing on any refusal after d.
func (c *gossipCluster) advanceTo(to int, d time.Duration) {
	c.t.Helper()
	waitFor(c.t, fmt.Sprintf("advance to %d", to), d, func() error {
		a := c.anyAgent()
		code, why := keyStep(c.t, a, "advance", &to)
		if code == http.StatusOK {
			return nil
		}
		if st := keyStatus(c.t, a); st.Phase == to {
			return nil // an earlier try landed though its answer was lost
		}
		return fmt.Errorf("%d %s", code, why)
	})
}

func (c *gossipCluster) anyAgent() *Agent {
	for _, a := range c.agents {
		if a != nil {
			return a
		}
	}
	return nil
}

// rangeCount counts the keys under prefix on agent a's state machine.
func rangeCount(t *testing.T, a *Agent, prefix string) int {
	t.Helper()
	view, err := a.Node().View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	kvs, _, err := view.Range([]byte(prefix), fsm.PrefixEnd([]byte(prefix)), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(kvs)
}

// TestKeyMigrationWalk: three nodes by gossip, one of them first on a schema that does
// not know the migration (an older release), which blocks advance past 0. Then, with
// writers and readers going through the typed API of every node the whole time, the
// migration walks 0 → 5 with a node restarted in every phase, a rollback from 2 and
// one from 4 (which copies new keys back first), and bad requests refused with nothing
// changed. Every read returns the object's last acknowledged write; at the end the old
// range is empty and the new range holds exactly the live objects, in the new form.
func TestKeyMigrationWalk(t *testing.T) {
	plain, withKM := loadTestSchema(t, "widgets-v1.yaml"), loadTestSchema(t, "widgets-keymig.yaml")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	for i := range c.cfgs {
		s := withKM
		if i == 2 {
			s = plain // the older release
		}
		c.cfgs[i] = withSchema(c.cfgs[i], s)
		c.cfgs[i].NoMigrate = false
		c.cfgs[i].Migrate = migrate.Config{Interval: 100 * time.Millisecond, Chunk: 20, Rate: -1}
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
	for i := range c.agents {
		waitFor(t, "registered", 20*time.Second, func() error { return c.agents[i].versions.Ready(context.Background()) })
	}
	// Objects from before the migration, which only the copy moves.
	const seeds = 150
	for i := range seeds {
		if code := putCodeThroughElections(t, c.agents[i%2], fmt.Sprintf("/apis/apps/v1/widgets/seed-%d", i), `{"spec":{"size":1}}`); code != http.StatusCreated && code != http.StatusOK {
			t.Fatalf("seed %d = %d", i, code)
		}
	}

	// Bad input: unknown name, skipped phase, rollback forward or without a target.
	if code := apiCall(t, c.agents[0], "POST", api.PathKeyMigrations+"/nope/advance", nil, nil); code != http.StatusNotFound {
		t.Errorf("advance of an unknown migration = %d, want 404", code)
	}
	two, one := 2, 1
	if code, why := keyStepThroughElections(t, c.agents[0], "advance", &two); code != http.StatusConflict || !strings.Contains(why, "skips phase 1") {
		t.Errorf("advance 0 → 2 = %d %s, want 409 naming the skipped phase", code, why)
	}
	if code, _ := keyStepThroughElections(t, c.agents[0], "rollback", nil); code != http.StatusBadRequest {
		t.Errorf("rollback without to = %d, want 400", code)
	}
	if code, why := keyStepThroughElections(t, c.agents[0], "rollback", &one); code != http.StatusConflict || !strings.Contains(why, "not before") {
		t.Errorf("rollback 0 → 1 = %d %s, want 409", code, why)
	}
	// The older release blocks the step, saying so.
	time.Sleep(time.Second) // gossip carries every node's announcement
	if code, why := keyStepThroughElections(t, c.agents[0], "advance", nil); code != http.StatusConflict ||
		!strings.Contains(why, "g3") || !strings.Contains(why, "does not support key migration "+keyMig) {
		t.Fatalf("advance with an older member = %d %s, want 409 naming g3", code, why)
	}
	if st := keyStatus(t, c.agents[0]); st.Phase != 0 || st.NewKeys != 0 {
		t.Fatalf("refused steps changed something: %+v", st)
	}
	// Upgrade it: restart with the schema that declares the migration.
	c.stop(2)
	c.cfgs[2].Schema = withKM
	c.start(2)
	waitFor(t, "g3 back", 20*time.Second, func() error { return c.agents[2].versions.Ready(context.Background()) })

	w := &typedWriters{t: t, c: c, last: map[string]int{}, stop: make(chan struct{}), client: &http.Client{Timeout: 5 * time.Second}}
	w.refresh()
	w.run(3, 25)
	defer func() {
		select {
		case <-w.stop:
		default:
			w.halt()
		}
	}()
	restart := func(i int) {
		c.stop(i)
		w.refresh()
		time.Sleep(200 * time.Millisecond)
		c.start(i)
		w.refresh()
		waitFor(t, "restarted", 20*time.Second, func() error { return c.agents[i].versions.Ready(context.Background()) })
	}
	const walkTimeout = 30 * time.Second
	c.advanceTo(1, walkTimeout)
	restart(0)
	c.advanceTo(2, walkTimeout)
	restart(1)
	// Rollback from 2 is immediate.
	c.rollbackTo(1)
	c.advanceTo(2, walkTimeout)
	c.advanceTo(3, walkTimeout)
	restart(2)
	// 3 → 4 waits for the copy; advanceTo retries until it is done.
	c.advanceTo(4, walkTimeout)
	// The copy moved every object, and the old range stays until phase 5: both hold at
	// least the seeds (the writers never touch them). Not old >= new: an object a
	// writer deleted in phases 1–3 (both keys gone) and creates again in phase 4 has a
	// new key only; a delete in phase 4 removes only the new key, so nothing offsets it.
	if st := keyStatus(t, c.anyAgent()); st.OldKeys < seeds || st.NewKeys < seeds {
		t.Errorf("after the copy: old %d, new %d keys, want both >= the %d seeds", st.OldKeys, st.NewKeys, seeds)
	}
	restart(c.leaderIndex())
	// Rollback from 4 copies new keys back first, then lands on 3.
	c.rollbackTo(3)
	waitFor(t, "rollback to 3 done", walkTimeout, func() error {
		if st := keyStatus(t, c.anyAgent()); st.Phase != 3 || st.RollbackTo != nil {
			return fmt.Errorf("phase %d rollbackTo %v", st.Phase, st.RollbackTo)
		}
		return nil
	})
	c.advanceTo(4, walkTimeout)
	c.advanceTo(5, walkTimeout)
	waitFor(t, "old keys deleted", walkTimeout, func() error {
		st := keyStatus(t, c.anyAgent())
		if st.Work == nil || st.Work.Kind != "delete" || st.Work.State != "Done" || st.OldKeys != 0 {
			return fmt.Errorf("work %+v, old keys %d", st.Work, st.OldKeys)
		}
		return nil
	})
	four := 4
	if code, why := keyStep(t, c.anyAgent(), "rollback", &four); code != http.StatusConflict || !strings.Contains(why, "started deleting") {
		t.Errorf("rollback from 5 after deletion = %d %s, want 409", code, why)
	}
	restart(0)
	time.Sleep(500 * time.Millisecond)
	w.halt()

	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) > 0 {
		t.Fatalf("reads that missed the last acknowledged write:\n%s", strings.Join(w.errs, "\n"))
	}
	if w.ops < 100 {
		t.Fatalf("only %d acknowledged operations during the walk", w.ops)
	}
	// Final state: every known object reads as last acknowledged from every node; the
	// old range is empty; the new range holds exactly the live objects, in the new form.
	a := c.anyAgent()
	for name := range w.last {
		for _, ag := range c.agents {
			w.mu.Unlock()
			w.check(ag.HTTPAddr(), name)
			w.mu.Lock()
		}
	}
	if len(w.errs) > 0 {
		t.Fatalf("final reads:\n%s", strings.Join(w.errs, "\n"))
	}
	if n := rangeCount(t, a, "/registry/apps/widgets/"); n != 0 {
		t.Errorf("old range holds %d keys after phase 5", n)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if code := apiCall(t, a, "GET", "/apis/apps/v1/widgets?limit=10000", nil, &list); code != http.StatusOK {
		t.Fatalf("list = %d", code)
	}
	if n := rangeCount(t, a, "/registry/apps/v2/widgets/"); n != len(list.Items) || n < 150 {
		t.Errorf("new range holds %d keys, the typed list %d objects (150 seeds at least)", n, len(list.Items))
	}
	view, _ := a.Node().View(context.Background(), fsm.Linearizable)
	kv, err := view.Get([]byte("/registry/apps/v2/widgets/seed-7"), 0)
	if err != nil || !strings.Contains(string(kv.Value), `"count":1`) {
		t.Errorf("copied seed-7 under the new key = %s, %v; want spec.count (the migration's ops)", kv.Value, err)
	}
	for name, want := range w.last {
		if want < 0 {
			if _, err := view.Get([]byte("/registry/apps/v2/widgets/"+name), 0); !errors.Is(err, fsm.ErrKeyNotFound) {
				t.Errorf("%s: deleted, but its new key is there", name)
			}
		}
	}
	t.Logf("%d acknowledged typed operations during the walk", w.ops)
}

// leaderIndex is the index of the leading agent (0 when none is known).
func (c *gossipCluster) leaderIndex() int {
	for i, a := range c.agents {
		if a != nil && a.Node().IsLeader() {
			return i
		}
	}
	return 0
}
