package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// The fail-fast check: a node cut off from the leader by a partition must refuse
// requests promptly — 503 NoLeader within FailFastLimit — instead of holding them until
// the client's timeout. While a partition fault (isolate, split) holds, every node on
// the minority side is probed, from FailFastGrace after the cut until the heal, with a
// write and a linearizable read over HTTP, one attempt each; every answer is timed.
// A probe that takes longer than FailFastLimit, succeeds, or fails otherwise than with
// 503 NoLeader is a problem of the run — except a write answered 504 Timeout in time: on
// a loaded machine a cut-off leader may step down later than the grace, and a write it
// was appending then has an unknown outcome, which is what 504 says. Probe writes go to keys outside the workload's
// prefix (FailFastPrefix), so the history checks ignore them.
const (
	// FailFastGrace: how long after the cut probing starts. A node notices the cut
	// within its heartbeat timeout (1s by default; a cut-off leader steps down within
	// its 1s lease), so requests from then on must be refused promptly.
	FailFastGrace = 2 * time.Second
	// FailFastLimit bounds how long a probe may take to be refused: the node's wait
	// for a leader (500ms by default) plus generous slack for a loaded machine.
	FailFastLimit = 1500 * time.Millisecond
	// FailFastPrefix is where probe writes go.
	FailFastPrefix = "chaos-failfast/"

	failFastEvery = 250 * time.Millisecond
)

// FailFastProbe is one timed request to a cut-off node.
type FailFastProbe struct {
	Node   string
	Op     string // "put" or "get"
	Took   time.Duration
	Reason string // the api.Error reason, "ok" on success, or the transport error
}

// failFast is a FaultRunner's record of its probes.
type failFast struct {
	wg sync.WaitGroup
	mu struct {
		sync.Mutex
		probes   []FailFastProbe
		problems []string
	}
}

// watchCutOff probes nodes, cut off by the fault being injected, until the returned
// function is called; that function stops the probes and then runs heal. Backends
// that do not expose nodes' HTTP addresses are not probed.
func (r *FaultRunner) watchCutOff(nodes []string, heal func() error) func() error {
	addrs, ok := r.c.(interface{ HTTPAddr(id string) string })
	if !ok || len(nodes) == 0 {
		return heal
	}
	stop := make(chan struct{})
	healing := make(chan time.Time, 1)
	for _, id := range nodes {
		cl, err := client.New([]string{addrs.HTTPAddr(id)}, client.Options{MaxRetries: -1, DialTimeout: time.Second,
			TLS: tlsFor(addrs.HTTPAddr(id)), Token: clusterToken(r.c)})
		if err != nil {
			continue
		}
		r.ff.wg.Add(1)
		go r.probeCutOff(id, cl, stop, healing)
	}
	var once sync.Once
	return func() error {
		once.Do(func() {
			healing <- time.Now()
			close(stop)
		})
		return heal()
	}
}

// probeCutOff probes node id through cl every failFastEvery from FailFastGrace after
// the start until stop is closed; probes still running when the heal began (its time
// comes on healing) do not count.
func (r *FaultRunner) probeCutOff(id string, cl *client.Client, stop <-chan struct{}, healing chan time.Time) {
	defer r.ff.wg.Done()
	defer cl.Close()
	select {
	case <-stop:
		return
	case <-time.After(FailFastGrace):
	}
	var probes []FailFastProbe
	var ends []time.Time
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s%s-%d", FailFastPrefix, id, i)
		for _, op := range []string{"put", "get"} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			var err error
			if op == "put" {
				_, err = cl.Put(ctx, key, []byte("probe"))
			} else {
				_, err = cl.Get(ctx, key)
			}
			cancel()
			probes = append(probes, FailFastProbe{Node: id, Op: op, Took: time.Since(start), Reason: reasonOf(err)})
			ends = append(ends, time.Now())
		}
		select {
		case <-stop:
			healed := <-healing
			healing <- healed // for the other nodes' probers
			kept := probes[:0]
			for j, p := range probes {
				if !ends[j].After(healed) {
					kept = append(kept, p)
				}
			}
			r.recordProbes(id, kept)
			return
		case <-time.After(failFastEvery):
		}
	}
}

// reasonOf names what a probe got back.
func reasonOf(err error) string {
	if err == nil {
		return "ok"
	}
	var e *api.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%d %s", e.Code, e.Reason)
	}
	return err.Error()
}

var (
	wantCutOff   = fmt.Sprintf("%d %s", http.StatusServiceUnavailable, api.ReasonNoLeader)
	wantInFlight = fmt.Sprintf("%d %s", http.StatusGatewayTimeout, api.ReasonTimeout)
)

// recordProbes keeps one fault's probes of node id and logs their times.
func (r *FaultRunner) recordProbes(id string, probes []FailFastProbe) {
	var took []time.Duration
	var problems []string
	for _, p := range probes {
		took = append(took, p.Took)
		switch {
		case p.Op == "put" && p.Reason == wantInFlight && p.Took <= FailFastLimit:
			// The write reached a node that still led (or followed a leader that still
			// led) and lost leadership while appending it: its outcome is unknown, which
			// a 504 says — promptly, which is what this check is about.
		case p.Reason != wantCutOff:
			problems = append(problems, fmt.Sprintf("fail-fast: %s to cut-off node %s answered %q after %s, want %s",
				p.Op, p.Node, p.Reason, p.Took.Round(time.Millisecond), wantCutOff))
		case p.Took > FailFastLimit:
			problems = append(problems, fmt.Sprintf("fail-fast: %s to cut-off node %s took %s to be refused, more than %s",
				p.Op, p.Node, p.Took.Round(time.Millisecond), FailFastLimit))
		}
	}
	if len(took) > 0 {
		slices.Sort(took)
		r.logf("fail-fast: node %s cut off: %d probes, %d problems; refused in min %s, median %s, max %s",
			id, len(took), len(problems), took[0].Round(time.Millisecond), took[len(took)/2].Round(time.Millisecond),
			took[len(took)-1].Round(time.Millisecond))
	} else {
		r.logf("fail-fast: node %s: no probe ended before the heal (probing starts %s after the cut)", id, FailFastGrace)
	}
	r.ff.mu.Lock()
	defer r.ff.mu.Unlock()
	r.ff.mu.probes = append(r.ff.mu.probes, probes...)
	r.ff.mu.problems = append(r.ff.mu.problems, problems...)
}

// FailFastProbes waits for the probes to end and returns them all.
func (r *FaultRunner) FailFastProbes() []FailFastProbe {
	r.ff.wg.Wait()
	r.ff.mu.Lock()
	defer r.ff.mu.Unlock()
	return slices.Clone(r.ff.mu.probes)
}

// FailFastProblems waits for the probes to end and returns the problems they found.
func (r *FaultRunner) FailFastProblems() []string {
	r.ff.wg.Wait()
	r.ff.mu.Lock()
	defer r.ff.mu.Unlock()
	return slices.Clone(r.ff.mu.problems)
}
