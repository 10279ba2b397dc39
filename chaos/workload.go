package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// Workload is the client traffic of a scenario: Clients concurrent loops, each picking
// a random member and a random operation on a small key set, every written value
// unique. Every loop stops by itself after Duration or MaxOps operations.
type Workload struct {
	Keys      []string // the key set; all share Prefix
	Prefix    string   // scans list this prefix
	Clients   int
	Duration  time.Duration
	MaxOps    int           // per client
	OpTimeout time.Duration // per operation (a whole scan counts as one)
	Pace      time.Duration // pause between one client's operations
	PageLimit int           // scan page size
	Weights   map[OpKind]int
	Watchers  int // watchers of Prefix running through the run (StartWatchers)
}

// DefaultWorkload is 8 keys, 6 clients, every operation kind.
func DefaultWorkload() Workload {
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%d", i)
	}
	return Workload{
		Keys: keys, Prefix: "k/", Clients: 6, Duration: 30 * time.Second, MaxOps: 5000,
		OpTimeout: 2 * time.Second, Pace: 15 * time.Millisecond, PageLimit: 3,
		Weights:  map[OpKind]int{OpGet: 25, OpGetSerial: 10, OpPut: 20, OpCAS: 15, OpDelete: 5, OpTxn: 15, OpScan: 10},
		Watchers: 2,
	}
}

// Validate names the bad field.
func (w Workload) Validate() error {
	switch {
	case len(w.Keys) < 2:
		return errors.New("chaos: Workload.Keys needs at least 2 keys (transactions write two)")
	case w.Clients < 1:
		return fmt.Errorf("chaos: Workload.Clients = %d, want >= 1", w.Clients)
	case w.Duration <= 0 || w.MaxOps <= 0 || w.OpTimeout <= 0:
		return errors.New("chaos: Workload.Duration, MaxOps and OpTimeout must be > 0")
	case len(w.Weights) == 0:
		return errors.New("chaos: Workload.Weights is empty")
	}
	return nil
}

// Run drives the clients until Duration passes, each has done MaxOps, or ctx ends,
// recording every operation in h.
func (w Workload) Run(ctx context.Context, c Cluster, h *History, seed int64) error {
	if err := w.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, w.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < w.Clients; i++ {
		wk := &worker{id: i, w: w, c: c, h: h, rng: rand.New(rand.NewSource(seed + int64(i)*7919)), known: map[string]int64{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk.run(ctx)
		}()
	}
	wg.Wait()
	return nil
}

type worker struct {
	id    int
	w     Workload
	c     Cluster
	h     *History
	rng   *rand.Rand
	known map[string]int64 // last mod revision this client saw per key (0 = absent)
	seq   int
}

func (wk *worker) run(ctx context.Context) {
	kinds, total := wk.kinds()
	for i := 0; i < wk.w.MaxOps && ctx.Err() == nil; i++ {
		members := wk.c.Members()
		node := members[wk.rng.Intn(len(members))]
		kind := pickKind(wk.rng, kinds, total, wk.w.Weights)
		r := wk.do(ctx, node, kind)
		if ctx.Err() != nil && r.Outcome != OutcomeOK && !r.IsWrite() {
			break // the run ended mid-read: nothing to record
		}
		wk.h.Add(r)
		pause := wk.w.Pace
		if r.Outcome != OutcomeOK {
			pause = 50*time.Millisecond + time.Duration(wk.rng.Intn(150))*time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (wk *worker) kinds() ([]OpKind, int) {
	var ks []OpKind
	total := 0
	for k := OpGet; k <= OpScan; k++ {
		if wk.w.Weights[k] > 0 {
			ks = append(ks, k)
			total += wk.w.Weights[k]
		}
	}
	return ks, total
}

func pickKind(rng *rand.Rand, kinds []OpKind, total int, weights map[OpKind]int) OpKind {
	n := rng.Intn(total)
	for _, k := range kinds {
		if n < weights[k] {
			return k
		}
		n -= weights[k]
	}
	return kinds[len(kinds)-1]
}

func (wk *worker) value() string {
	wk.seq++
	return fmt.Sprintf("c%d-%d", wk.id, wk.seq)
}

// do runs one operation against node and returns its record. The operation's context
// is not the run's: an operation in flight when the run ends finishes (bounded by
// OpTimeout), so its outcome is known whenever possible.
func (wk *worker) do(_ context.Context, node string, kind OpKind) Record {
	ctx, cancel := context.WithTimeout(context.Background(), wk.w.OpTimeout)
	defer cancel()
	cl := wk.c.Client(node)
	r := Record{Client: wk.id, Node: node, Incarnation: wk.c.Incarnation(node), Kind: kind}
	r.Key = wk.w.Keys[wk.rng.Intn(len(wk.w.Keys))]
	r.Call = wk.h.Now()
	var err error
	switch kind {
	case OpGet, OpGetSerial:
		err = doGet(ctx, cl, &r)
	case OpPut:
		r.Value = wk.value()
		r.Rev, err = cl.Put(ctx, r.Key, []byte(r.Value))
	case OpCAS:
		r.Value, r.PrevRev = wk.value(), wk.known[r.Key]
		r.Rev, err = cl.PutCAS(ctx, r.Key, []byte(r.Value), r.PrevRev)
		r.Succeeded = err == nil
		if client.IsConflict(err) {
			err = nil
		}
	case OpDelete:
		var resp *api.DeleteResponse
		if resp, err = cl.Delete(ctx, r.Key); err == nil {
			r.Rev, r.Deleted = resp.Revision, resp.Deleted
		}
	case OpTxn:
		err = wk.doTxn(ctx, cl, &r)
	case OpScan:
		r.Key, r.Prefix, r.Limit = "", wk.w.Prefix, wk.w.PageLimit
		err = doScan(ctx, cl, &r)
	}
	r.Return = wk.h.Now()
	if wk.c.Incarnation(node) != r.Incarnation {
		// The node restarted while the operation was in flight, and a retry may have
		// reached the new process: which one answered is unknown.
		r.Incarnation = IncarnationUnknown
	}
	r.Outcome = classify(err, r.IsWrite())
	if err != nil {
		r.Err = err.Error()
		r.Unexpected = unexpected(err)
	}
	wk.learn(&r)
	return r
}

// learn remembers the mod revisions this client saw, for its next CAS and txn guards.
func (wk *worker) learn(r *Record) {
	if r.Outcome != OutcomeOK {
		return
	}
	switch {
	case (r.Kind == OpGet || r.Kind == OpGetSerial) && r.Found:
		wk.known[r.Key] = r.ModRev
	case r.Kind == OpGet || r.Kind == OpGetSerial:
		wk.known[r.Key] = 0
	case r.Kind == OpPut, r.Kind == OpCAS && r.Succeeded:
		wk.known[r.Key] = r.Rev
	case r.Kind == OpDelete:
		wk.known[r.Key] = 0
	case r.Kind == OpTxn && r.Succeeded:
		wk.known[r.Key], wk.known[r.Key2] = r.Rev, r.Rev
	case r.Kind == OpTxn && r.Found:
		wk.known[r.Key] = r.ModRev
	case r.Kind == OpTxn:
		wk.known[r.Key] = 0
	}
}

func doGet(ctx context.Context, cl *client.Client, r *Record) error {
	var opts []client.GetOption
	if r.Kind == OpGetSerial {
		opts = append(opts, client.WithSerializable())
	}
	resp, err := cl.Get(ctx, r.Key, opts...)
	switch {
	case client.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	r.Found, r.GotValue, r.ModRev, r.Rev = true, string(resp.Value), resp.ModRevision, resp.Revision
	return nil
}

// doTxn: if Key's mod revision is what this client last saw, put Key and Key2 at one
// revision; otherwise read Key.
func (wk *worker) doTxn(ctx context.Context, cl *client.Client, r *Record) error {
	for r.Key2 = r.Key; r.Key2 == r.Key; {
		r.Key2 = wk.w.Keys[wk.rng.Intn(len(wk.w.Keys))]
	}
	r.Value, r.Value2, r.PrevRev = wk.value(), wk.value(), wk.known[r.Key]
	resp, err := cl.Txn(ctx, &api.TxnRequest{
		Compare: []api.Compare{{Key: r.Key, Target: api.TargetModRevision, Result: api.ResultEqual, Int: r.PrevRev}},
		Success: []api.Op{{Type: api.OpPut, Key: r.Key, Value: []byte(r.Value)}, {Type: api.OpPut, Key: r.Key2, Value: []byte(r.Value2)}},
		Failure: []api.Op{{Type: api.OpGet, Key: r.Key}},
	})
	if err != nil {
		return err
	}
	r.Succeeded, r.Rev = resp.Succeeded, resp.Revision
	if !resp.Succeeded {
		if len(resp.Responses) != 1 {
			return fmt.Errorf("%w: failed txn has %d responses, want 1", errBadAnswer, len(resp.Responses))
		}
		if kvs := resp.Responses[0].KVs; len(kvs) > 0 {
			r.Found, r.GotValue, r.ModRev = true, string(kvs[0].Value), kvs[0].ModRevision
		}
	}
	return nil
}

// doScan lists Prefix page by page on one node; every page must come back.
func doScan(ctx context.Context, cl *client.Client, r *Record) error {
	opts := client.ListOptions{Limit: r.Limit}
	for page := 0; ; page++ {
		if page > 100 {
			return fmt.Errorf("%w: scan of %d keys did not end after 100 pages", errBadAnswer, len(r.Items))
		}
		resp, err := cl.List(ctx, r.Prefix, opts)
		if err != nil {
			return err
		}
		if page == 0 {
			r.Rev = resp.Revision
		}
		r.PageRevs = append(r.PageRevs, resp.Revision)
		r.PageSizes = append(r.PageSizes, len(resp.Items))
		for _, it := range resp.Items {
			r.Items = append(r.Items, ScanItem{Key: it.Key, Value: string(it.Value), ModRev: it.ModRevision})
		}
		if resp.Continue == "" {
			return nil
		}
		opts.Continue = resp.Continue
	}
}

// unexpected says whether err breaks the API's promises for the valid requests the
// workload sends: a 4xx other than 404/409, a 500, or a malformed answer.
func unexpected(err error) bool {
	if errors.Is(err, errBadAnswer) {
		return true
	}
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code == http.StatusInternalServerError ||
			e.Code >= 400 && e.Code < 500 && e.Code != http.StatusNotFound && e.Code != http.StatusConflict
	}
	return false
}

// errBadAnswer marks an answer that breaks the API's own rules (recorded as failed and
// reported as a violation).
var errBadAnswer = errors.New("chaos: malformed answer")

// classify turns an operation's error into what the client learned. A write is
// definitely not applied only when the request never left (connection refused) or the
// server said so (503 Unavailable or NoLeader); any other failure leaves it unknown. A failed
// read is just failed.
func classify(err error, write bool) Outcome {
	if err == nil {
		return OutcomeOK
	}
	if !write {
		return OutcomeFailed
	}
	var e *api.Error
	if errors.As(err, &e) {
		switch {
		case e.Code == http.StatusServiceUnavailable && (e.Reason == api.ReasonUnavailable || e.Reason == api.ReasonNoLeader):
			return OutcomeFailed
		case e.Code == http.StatusBadRequest, e.Code == http.StatusNotFound,
			e.Code == http.StatusRequestEntityTooLarge, e.Code == http.StatusMethodNotAllowed:
			return OutcomeFailed
		}
		return OutcomeUnknown
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		return OutcomeFailed
	}
	return OutcomeUnknown
}
