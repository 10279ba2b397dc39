//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/keel-kv/keel/kv/api"
)

const chaosKeyMig = "widgets-v2-keys"

// TestKeyMigrationWalk walks a phased key migration (RFD 126) 0 → 5 on three keel
// processes with gossip, while four clients write, delete and read widgets through the
// typed API of every node, each object owned by one client, every write a unique value.
// A node restarts (SIGTERM) in every phase, the leader is killed (SIGKILL) during the
// copy of phase 3 and during the delete of phase 5, and the walk rolls back from 2 and
// from 4 on the way. The history goes through the chaos checker's model (porcupine,
// KVModel: every read returns the last acknowledged write of its object, whichever key
// holds it; revisions are checked as the values' writes gave them, since a copy gives
// an object a new mod revision without changing it), and at the end the old range is
// empty and the new range holds exactly the live objects.
//
// It is one declared run of this binary (expectRun): strict mode counts it.
func TestKeyMigrationWalk(t *testing.T) {
	expectRun()
	start := time.Now()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultProcConfig()
	cfg.Bin, cfg.Dir, cfg.Subnet, cfg.Gossip, cfg.Logf = keelBin(t), t.TempDir(), 93, true, t.Logf
	cfg.ExtraArgs = []string{"-schema", filepath.Join(root, "docs/examples/widgets-keymig.yaml"), "-migrate-rate", "150"}
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	c, err := StartProcCluster(sctx, cfg)
	cancel()
	if err != nil {
		cannotRun(t, "start 3 keel processes with gossip: %v", err)
	}
	defer c.Close()
	k := &keyWalk{t: t, c: c, h: NewHistory(), hc: &http.Client{Timeout: 3 * time.Second}}
	ids := c.Members()
	for _, id := range ids {
		if err := k.waitReady(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	const seeds = 500
	for i := range seeds {
		code, body := 0, []byte(nil)
		for try := 0; try < 50 && code != http.StatusCreated; try++ {
			if try > 0 {
				time.Sleep(100 * time.Millisecond) // a leader change while the cluster settles: 503, nothing written
			}
			code, body = k.do(ctx, ids[i%3], "PUT", fmt.Sprintf("/apis/apps/v1/widgets/seed-%d", i), `{"spec":{"size":1}}`)
		}
		if code != http.StatusCreated {
			t.Fatalf("seed %d: %d %s", i, code, body)
		}
	}
	wctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for cl := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); k.client(wctx, cl, 12) }()
	}
	time.Sleep(time.Second)

	steps := []func() error{
		func() error { return k.advance(ctx, 1) },
		func() error { return k.restart(ctx, ids[0]) },
		func() error { return k.advance(ctx, 2) },
		func() error { return k.restart(ctx, ids[1]) },
		func() error { return k.rollback(ctx, 1) },
		func() error { return k.advance(ctx, 2) },
		func() error { return k.advance(ctx, 3) },
		func() error { return k.killLeaderDuring(ctx, "copy") },
		func() error { return k.advance(ctx, 4) },
		func() error { return k.restart(ctx, ids[2]) },
		func() error { return k.rollback(ctx, 3) },
		func() error { return k.waitPhase(ctx, 3) },
		func() error { return k.advance(ctx, 4) },
		func() error { return k.advance(ctx, 5) },
		func() error { return k.killLeaderDuring(ctx, "delete") },
		func() error { return k.waitDeleted(ctx) },
		func() error { return k.restart(ctx, ids[0]) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			stopClients()
			wg.Wait()
			k.artifacts()
			t.Fatalf("step %d: %v", i+1, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopClients()
	wg.Wait()

	records := k.h.Records()
	keys := k.keys()
	fixRevisions(records)
	res, info := porcupine.CheckOperationsVerbose(KVModel.ToModel(), Operations(records, keys), 60*time.Second)
	var problems []string
	if res != porcupine.Ok {
		problems = append(problems, fmt.Sprintf("history is not linearizable against KVModel (%v)", res))
		art := k.artifacts()
		porcupine.VisualizePath(KVModel.ToModel(), info, filepath.Join(art, "keymig-history.html"))
	}
	counts := k.h.Counts()
	if counts[OutcomeOK] < 300 {
		problems = append(problems, fmt.Sprintf("only %d acknowledged operations", counts[OutcomeOK]))
	}
	problems = append(problems, k.checkFinal(ctx, seeds)...)
	totals.Lock()
	totals.runs++
	totals.ops += len(records)
	totals.unknown += counts[OutcomeUnknown]
	totals.elapsed += time.Since(start)
	if len(problems) > 0 {
		totals.failed++
	}
	totals.Unlock()
	t.Logf("KEYMIG walk 0→5: ops=%d ok=%d unknown=%d failed=%d steps=%d elapsed=%v", len(records), counts[OutcomeOK],
		counts[OutcomeUnknown], counts[OutcomeFailed], len(steps), time.Since(start).Round(time.Second))
	for _, p := range problems {
		t.Errorf("problem: %s", p)
	}
}

// keyWalk drives a key-migration walk on a ProcCluster and records the clients' history.
type keyWalk struct {
	t   *testing.T
	c   *ProcCluster
	h   *History
	hc  *http.Client
	mu  sync.Mutex
	ids map[string]bool // object names the clients used
}

func (k *keyWalk) do(ctx context.Context, id, method, path, body string) (int, []byte) {
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+k.c.HTTPAddr(id)+path, strings.NewReader(body))
	resp, err := k.hc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (k *keyWalk) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.ids))
	for name := range k.ids {
		out = append(out, name)
	}
	return out
}

// client loops over its objects: put a unique value, read it back, now and then
// delete; each operation one Record.
func (k *keyWalk) client(ctx context.Context, cl, objects int) {
	ids := k.c.Members()
	for n := 0; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("c%d-o%d", cl, n%objects)
		k.mu.Lock()
		if k.ids == nil {
			k.ids = map[string]bool{}
		}
		k.ids[name] = true
		k.mu.Unlock()
		node := ids[(cl+n)%len(ids)]
		path := "/apis/apps/v1/widgets/" + name
		r := Record{Client: cl, Node: node, Key: name, Call: k.h.Now()}
		switch {
		case n%9 == 4:
			r.Kind = OpDelete
			code, body := k.do(ctx, node, "DELETE", path, "")
			r.Return = k.h.Now()
			switch code {
			case http.StatusOK:
				var out struct{ Revision int64 }
				json.Unmarshal(body, &out)
				r.Outcome, r.Deleted, r.Rev = OutcomeOK, 1, out.Revision
			case http.StatusNotFound:
				r.Outcome = OutcomeOK
				r.Rev = 0
			default:
				r.Outcome, r.Err = writeOutcome(code, body), string(body)
			}
		case n%3 == 1:
			r.Kind = OpGet
			code, body := k.do(ctx, node, "GET", path, "")
			r.Return = k.h.Now()
			switch code {
			case http.StatusOK:
				r.Outcome, r.Found = OutcomeOK, true
				r.GotValue, r.ModRev = objValue(body)
			case http.StatusNotFound:
				r.Outcome = OutcomeOK
			default:
				r.Outcome, r.Err = OutcomeFailed, string(body)
			}
		default:
			r.Kind = OpPut
			r.Value = strconv.Itoa(cl*10_000_000 + n)
			code, body := k.do(ctx, node, "PUT", path, `{"spec":{"size":`+r.Value+`}}`)
			r.Return = k.h.Now()
			switch code {
			case http.StatusOK, http.StatusCreated:
				r.Outcome = OutcomeOK
				_, r.Rev = objValue(body)
			default:
				r.Outcome, r.Err = writeOutcome(code, body), string(body)
			}
		}
		if ctx.Err() != nil && r.Outcome != OutcomeOK {
			r.Outcome = OutcomeUnknown
			if r.Kind == OpGet {
				r.Outcome = OutcomeFailed
			}
		}
		k.h.Add(r)
	}
}

// writeOutcome is what a write's answer says, by the rules the main workload's
// classify follows: a refusal (400, 409) did nothing; so did a request that never left
// (connection refused: its node was down) and one the server answered 503 Unavailable
// or NoLeader (keel's promise that nothing was proposed — which the history check then
// holds it to); anything else may have landed.
func writeOutcome(code int, body []byte) Outcome {
	switch {
	case code == http.StatusConflict, code == http.StatusBadRequest:
		return OutcomeFailed
	case code == 0 && bytes.Contains(body, []byte("connection refused")):
		return OutcomeFailed
	case code == http.StatusServiceUnavailable:
		var e api.Error
		if json.Unmarshal(body, &e) == nil && (e.Reason == api.ReasonUnavailable || e.Reason == api.ReasonNoLeader) {
			return OutcomeFailed
		}
	}
	return OutcomeUnknown
}

// objValue returns spec.size (the unique value) and metadata.revision of an object.
func objValue(body []byte) (string, int64) {
	var obj struct {
		Metadata struct {
			Revision int64 `json:"revision"`
		} `json:"metadata"`
		Spec struct {
			Size json.Number `json:"size"`
		} `json:"spec"`
	}
	json.Unmarshal(body, &obj)
	return string(obj.Spec.Size), obj.Metadata.Revision
}

// fixRevisions makes a read's mod revision the revision of the write whose (unique)
// value it returned, when that write's revision is known: a copy in phase 3 stores an
// object under its new key at a later revision without changing it, which the typed
// API reports, and which KVModel would take for a write nobody made.
func fixRevisions(records []Record) {
	byValue := map[string]int64{}
	for _, r := range records {
		if r.Kind == OpPut && r.Outcome == OutcomeOK {
			byValue[r.Key+"="+r.Value] = r.Rev
		}
	}
	for i := range records {
		r := &records[i]
		if r.Kind != OpGet || !r.Found {
			continue
		}
		if rev, ok := byValue[r.Key+"="+r.GotValue]; ok {
			r.ModRev = rev
		}
		r.Rev = 0
	}
}

func (k *keyWalk) leader(ctx context.Context) (string, error) {
	return WaitLeader(ctx, k.c)
}

func (k *keyWalk) waitReady(ctx context.Context, id string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := k.do(ctx, id, "GET", "/readyz", ""); code == http.StatusOK {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after 30s", id)
}

// status reads the key migration's status from any node that answers.
func (k *keyWalk) status(ctx context.Context) (*api.KeyMigrationStatus, error) {
	var last error
	for _, id := range k.c.Members() {
		code, body := k.do(ctx, id, "GET", api.PathKeyMigrations+"/"+chaosKeyMig, "")
		if code != http.StatusOK {
			last = fmt.Errorf("%s: %d %s", id, code, body)
			continue
		}
		var st api.KeyMigrationStatus
		if err := json.Unmarshal(body, &st); err != nil {
			return nil, err
		}
		return &st, nil
	}
	return nil, last
}

// advance asks until the cluster takes the step (members catching up after a restart,
// the copy finishing), for at most 40 s.
func (k *keyWalk) advance(ctx context.Context, to int) error {
	k.t.Logf("advance to %d", to)
	deadline := time.Now().Add(40 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if st, err := k.status(ctx); err == nil && st.Phase == to && st.RollbackTo == nil {
			return nil
		}
		for _, id := range k.c.Members() {
			code, body := k.do(ctx, id, "POST", api.PathKeyMigrations+"/"+chaosKeyMig+"/advance",
				fmt.Sprintf(`{"to":%d,"by":"chaos"}`, to))
			if code == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", code, body)
			if code != 0 {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("advance to %d: %s", to, last)
}

func (k *keyWalk) rollback(ctx context.Context, to int) error {
	k.t.Logf("rollback to %d", to)
	id, err := k.leader(ctx)
	if err != nil {
		return err
	}
	code, body := k.do(ctx, id, "POST", api.PathKeyMigrations+"/"+chaosKeyMig+"/rollback", fmt.Sprintf(`{"to":%d,"by":"chaos"}`, to))
	if code != http.StatusOK {
		return fmt.Errorf("rollback to %d: %d %s", to, code, body)
	}
	return nil
}

func (k *keyWalk) waitPhase(ctx context.Context, phase int) error {
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := k.status(ctx); err == nil && st.Phase == phase && st.RollbackTo == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("phase %d not reached in 40s", phase)
}

// restart stops id (SIGTERM) and starts it again on its data dir.
func (k *keyWalk) restart(ctx context.Context, id string) error {
	k.t.Logf("restart %s", id)
	if err := k.c.Restart(ctx, id); err != nil {
		return err
	}
	return k.waitReady(ctx, id)
}

// killLeaderDuring waits until the leader's work of the given kind has written
// something, then SIGKILLs the leader and starts it again: a new leader resumes the
// work from the checkpoint in Raft.
func (k *keyWalk) killLeaderDuring(ctx context.Context, kind string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := k.status(ctx)
		if err == nil && st.Work != nil && st.Work.Kind == kind && st.Work.Scanned > 0 {
			if st.Work.State == "Done" {
				return fmt.Errorf("the %s finished (%d keys) before the leader could be killed during it", kind, st.Work.Written)
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s work started: %+v %v", kind, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	id, err := k.leader(ctx)
	if err != nil {
		return err
	}
	k.t.Logf("kill leader %s during the %s", id, kind)
	if err := k.c.Kill(id); err != nil {
		return err
	}
	time.Sleep(time.Second)
	if err := k.c.Start(ctx, id); err != nil {
		return err
	}
	return k.waitReady(ctx, id)
}

func (k *keyWalk) waitDeleted(ctx context.Context) error {
	deadline := time.Now().Add(40 * time.Second)
	var st *api.KeyMigrationStatus
	var err error
	for time.Now().Before(deadline) {
		st, err = k.status(ctx)
		if err == nil && st.Work != nil && st.Work.Kind == "delete" && st.Work.State == "Done" && st.OldKeys == 0 {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("old keys not deleted: %+v %v", st, err)
}

// checkFinal: every node reads the same objects; the old range is empty; the new range
// holds exactly the live objects (the typed list), seeds included.
func (k *keyWalk) checkFinal(ctx context.Context, seeds int) []string {
	var problems []string
	var lens []int
	for _, id := range k.c.Members() {
		code, body := k.do(ctx, id, "GET", "/apis/apps/v1/widgets?limit=100000", "")
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
			problems = append(problems, fmt.Sprintf("%s: list %d", id, code))
			continue
		}
		lens = append(lens, len(list.Items))
	}
	st, err := k.status(ctx)
	if err != nil {
		return append(problems, err.Error())
	}
	if st.Phase != 5 || st.OldKeys != 0 {
		problems = append(problems, fmt.Sprintf("final: phase %d, %d old keys, want 5 and 0", st.Phase, st.OldKeys))
	}
	for i, n := range lens {
		if int64(n) != st.NewKeys || n < seeds {
			problems = append(problems, fmt.Sprintf("node %d lists %d objects; the new range holds %d keys (%d seeds)", i, n, st.NewKeys, seeds))
		}
	}
	return problems
}

func (k *keyWalk) artifacts() string {
	art := filepath.Join(ArtifactsRoot(), "keymig-walk")
	os.MkdirAll(art, 0o755)
	k.c.CollectLogs(art)
	if err := k.h.WriteJSON(filepath.Join(art, "history.jsonl")); err != nil && !errors.Is(err, os.ErrExist) {
		k.t.Logf("history: %v", err)
	}
	k.t.Logf("artifacts: %s", art)
	return art
}
