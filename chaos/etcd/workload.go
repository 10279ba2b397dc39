package etcdchaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/chaos"
)

// Nodes is what the workload needs of a cluster: its members, one etcd client per
// member (each with that member alone as its endpoint, so a record names the node that
// answered), and each member's restart count.
type Nodes interface {
	Members() []string
	Incarnation(id string) int
	Etcd(id string) *clientv3.Client
}

// Workload is chaos's default traffic (chaos.DefaultWorkload: 8 keys, 6 clients, every
// operation kind with its weight, a 2 s deadline per operation) sent through etcd's
// client: each operation is the etcd request an etcd user would send for it.
type Workload struct {
	chaos.Workload
}

// DefaultWorkload is chaos.DefaultWorkload without watchers (this judge checks the
// KV history only).
func DefaultWorkload() Workload {
	w := chaos.DefaultWorkload()
	w.Watchers = 0
	return Workload{w}
}

// Run drives the clients until Duration passes, each has done MaxOps, or ctx ends,
// recording every operation in h.
func (w Workload) Run(ctx context.Context, c Nodes, h *chaos.History, seed int64) error {
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
	c     Nodes
	h     *chaos.History
	rng   *rand.Rand
	known map[string]int64 // last mod revision this client saw per key (0 = absent)
	seq   int
}

var kinds = []chaos.OpKind{chaos.OpGet, chaos.OpGetSerial, chaos.OpPut, chaos.OpCAS, chaos.OpDelete, chaos.OpTxn, chaos.OpScan}

func (wk *worker) run(ctx context.Context) {
	total := 0
	for _, k := range kinds {
		total += wk.w.Weights[k]
	}
	for i := 0; i < wk.w.MaxOps && ctx.Err() == nil; i++ {
		members := wk.c.Members()
		node := members[wk.rng.Intn(len(members))]
		r := wk.do(node, wk.pick(total))
		if ctx.Err() != nil && r.Outcome != chaos.OutcomeOK && !r.IsWrite() {
			break // the run ended mid-read: nothing to record
		}
		wk.h.Add(r)
		pause := wk.w.Pace
		if r.Outcome != chaos.OutcomeOK {
			pause = 50*time.Millisecond + time.Duration(wk.rng.Intn(150))*time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (wk *worker) pick(total int) chaos.OpKind {
	n := wk.rng.Intn(total)
	for _, k := range kinds {
		if n < wk.w.Weights[k] {
			return k
		}
		n -= wk.w.Weights[k]
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
func (wk *worker) do(node string, kind chaos.OpKind) chaos.Record {
	ctx, cancel := context.WithTimeout(context.Background(), wk.w.OpTimeout)
	defer cancel()
	cl := wk.c.Etcd(node)
	r := chaos.Record{Client: wk.id, Node: node, Incarnation: wk.c.Incarnation(node), Kind: kind}
	r.Key = wk.w.Keys[wk.rng.Intn(len(wk.w.Keys))]
	switch kind {
	case chaos.OpPut:
		r.Value = wk.value()
	case chaos.OpCAS:
		r.Value, r.PrevRev = wk.value(), wk.known[r.Key]
	case chaos.OpTxn:
		for r.Key2 = r.Key; r.Key2 == r.Key; {
			r.Key2 = wk.w.Keys[wk.rng.Intn(len(wk.w.Keys))]
		}
		r.Value, r.Value2, r.PrevRev = wk.value(), wk.value(), wk.known[r.Key]
	case chaos.OpScan:
		r.Key, r.Prefix, r.Limit = "", wk.w.Prefix, wk.w.PageLimit
	}
	r.Call = wk.h.Now()
	err := Do(ctx, cl, &r)
	r.Return = wk.h.Now()
	if wk.c.Incarnation(node) != r.Incarnation {
		// The node restarted while the operation was in flight, and a retry may have
		// reached the new process: which one answered is unknown.
		r.Incarnation = chaos.IncarnationUnknown
	}
	r.Outcome = Classify(err, r.IsWrite())
	if err != nil {
		r.Err = err.Error()
		r.Unexpected = Unexpected(err)
	}
	wk.learn(&r)
	return r
}

// learn remembers the mod revisions this client saw, for its next CAS and txn guards.
func (wk *worker) learn(r *chaos.Record) {
	if r.Outcome != chaos.OutcomeOK {
		return
	}
	switch {
	case (r.Kind == chaos.OpGet || r.Kind == chaos.OpGetSerial) && r.Found:
		wk.known[r.Key] = r.ModRev
	case r.Kind == chaos.OpGet || r.Kind == chaos.OpGetSerial:
		wk.known[r.Key] = 0
	case r.Kind == chaos.OpPut, r.Kind == chaos.OpCAS && r.Succeeded:
		wk.known[r.Key] = r.Rev
	case r.Kind == chaos.OpDelete:
		wk.known[r.Key] = 0
	case r.Kind == chaos.OpTxn && r.Succeeded:
		wk.known[r.Key], wk.known[r.Key2] = r.Rev, r.Rev
	case r.Kind == chaos.OpTxn && r.Found:
		wk.known[r.Key] = r.ModRev
	case r.Kind == chaos.OpTxn:
		wk.known[r.Key] = 0
	}
}

// Classify turns an etcd client error into what the client learned. A write is
// definitely not applied only when keel said so: "no leader" and "leader changed"
// (raft.ErrNoLeader, raft.ErrNotLeader: the write never reached the log); a refused
// request (invalid argument, permission denied) did nothing either. Any other failure
// (a deadline, a connection lost, "request timed out") leaves a write unknown. A
// failed read is just failed.
func Classify(err error, write bool) chaos.Outcome {
	if err == nil {
		return chaos.OutcomeOK
	}
	if !write {
		return chaos.OutcomeFailed
	}
	switch rpctypes.ErrorDesc(err) {
	case rpctypes.ErrNoLeader.Error(), rpctypes.ErrLeaderChanged.Error(),
		rpctypes.ErrEmptyKey.Error(), rpctypes.ErrPermissionDenied.Error(), rpctypes.ErrTooManyOps.Error():
		return chaos.OutcomeFailed
	}
	return chaos.OutcomeUnknown
}

// Unexpected says whether err breaks the API's promises for the valid requests the
// workload sends: an answer that breaks etcd's own rules, or an error a valid request
// must never get (compacted, future revision, invalid argument, permission denied).
func Unexpected(err error) bool {
	if errors.Is(err, errBadAnswer) {
		return true
	}
	switch rpctypes.ErrorDesc(err) {
	case rpctypes.ErrCompacted.Error(), rpctypes.ErrFutureRev.Error(), rpctypes.ErrEmptyKey.Error(),
		rpctypes.ErrPermissionDenied.Error(), rpctypes.ErrTooManyOps.Error(), rpctypes.ErrDuplicateKey.Error():
		return true
	}
	return false
}

// errBadAnswer marks an answer that breaks etcd's own rules (recorded as failed and
// reported as a violation).
var errBadAnswer = errors.New("etcdchaos: malformed answer")
