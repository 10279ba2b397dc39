package differential

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Defaults of a run; KEEL_ETCD_DIFF_SEQS, KEEL_ETCD_DIFF_OPS and KEEL_ETCD_DIFF_SEED
// (the first seed, or "time") change them for longer runs.
const (
	defaultSeqs = 200
	defaultOps  = 30
	defaultSeed = 1
)

// TestDifferential runs random operation sequences against keel and etcd and
// compares every answer after normalisation (normalise_test.go). A difference fails
// with the seed and the shortest operation list that still shows it.
func TestDifferential(t *testing.T) {
	seqs, nops, seed := envInt(t, "KEEL_ETCD_DIFF_SEQS", defaultSeqs), envInt(t, "KEEL_ETCD_DIFF_OPS", defaultOps), int64(defaultSeed)
	if v := os.Getenv("KEEL_ETCD_DIFF_SEED"); v == "time" {
		seed = time.Now().UnixNano() % 1e9
	} else if v != "" {
		seed = int64(envInt(t, "KEEL_ETCD_DIFF_SEED", 0))
	}
	for _, r := range regressions {
		check(t, "regression: "+r.bug, r.ops)
	}
	start := time.Now()
	for i := 0; i < seqs; i++ {
		s := seed + int64(i)
		name := fmt.Sprintf("seed %d (KEEL_ETCD_DIFF_SEED=%d KEEL_ETCD_DIFF_SEQS=1 KEEL_ETCD_DIFF_OPS=%d reruns it)", s, s, nops)
		if !check(t, name, generate(s, nops)) {
			return // one shrunk difference at a time
		}
	}
	t.Logf("%d sequences of %d operations from seed %d: no difference (%v)", seqs, nops, seed, time.Since(start).Round(time.Millisecond))
	t.Logf("answers compared, by operation (errors, skipped): %s", tallies())
}

// check runs one sequence and, on a difference, shrinks it and fails the test; it
// reports whether the sequence passed.
func check(t *testing.T, name string, ops []op) bool {
	t.Helper()
	f := runSequence(ops)
	if f == nil {
		return true
	}
	small, mf := shrink(ops, f)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: keel and etcd differ\n", name)
	fmt.Fprintf(&b, "minimal operation list (%d of %d):\n", len(small), len(ops))
	for i, o := range small {
		fmt.Fprintf(&b, "  %2d. %s\n", i, o)
	}
	fmt.Fprintf(&b, "at operation %d:\n  etcd: %s\n  keel: %s", mf.at, mf.etcd, mf.keel)
	t.Error(b.String())
	return false
}

// failure is the first operation whose normal forms differ.
type failure struct {
	at         int
	etcd, keel string
}

var prefixes atomic.Int64

// runSequence runs ops on both servers under a fresh prefix and returns the first
// difference, or nil.
func runSequence(ops []op) *failure {
	prefix := fmt.Sprintf("diff%07d/", prefixes.Add(1))
	e, k := &side{srv: etcdSrv, prefix: prefix}, &side{srv: keelSrv, prefix: prefix}
	defer e.revokeAll()
	defer k.revokeAll()
	for _, s := range []*side{e, k} {
		rev, err := s.current()
		if err != nil {
			return &failure{at: -1, etcd: "start: " + err.Error(), keel: "start: " + err.Error()}
		}
		s.revs = []int64{rev}
	}
	st := &shared{}
	etcdRev := e.revs[0]
	for i, o := range ops {
		er, kr := both(func() result { return e.exec(o, st) }, func() result { return k.exec(o, st) })
		if er.rev > etcdRev { // a write: both sides count it
			etcdRev = er.rev
			e.revs, k.revs = append(e.revs, er.rev), append(k.revs, kr.rev)
		}
		if o.kind == kCompact && er.err == nil && er.rev != 0 {
			st.compacted = e.rankOf(o.rank)
		}
		dropLeases(o, er)
		dropLeases(o, kr)
		en, kn := normer{e}.norm(er), normer{k}.norm(kr)
		tally(o, en)
		if en != kn {
			return &failure{at: i, etcd: en, keel: kn}
		}
	}
	return nil
}

// current is the server's revision now.
func (s *side) current() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.srv.c.Get(ctx, s.prefix)
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// revokeAll revokes the sequence's leases, so that none expires during a later one.
func (s *side) revokeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range s.leases {
		s.srv.c.Revoke(ctx, id)
	}
}

// shrink removes operations one at a time while the sequence still differs
// somewhere, and returns the shortest list found with its difference.
func shrink(ops []op, f *failure) ([]op, *failure) {
	cur := ops[:f.at+1]
	for budget, changed := 200, true; changed && budget > 0; {
		changed = false
		for i := len(cur) - 1; i >= 0 && budget > 0; i-- {
			cand := append(append([]op{}, cur[:i]...), cur[i+1:]...)
			budget--
			if nf := runSequence(cand); nf != nil {
				cur, f, changed = cand[:nf.at+1], nf, true
				i = min(i, len(cur))
			}
		}
	}
	return cur, f
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// answered counts the answers compared, by operation kind: all, errors, skipped; so
// that a run shows it compared answers, not only refusals.
var answered [len(kindNames)][3]int

func tally(o op, norm string) {
	answered[o.kind][0]++
	switch {
	case strings.HasPrefix(norm, "error"):
		answered[o.kind][1]++
	case strings.HasPrefix(norm, "skipped"):
		answered[o.kind][2]++
	}
}

func tallies() string {
	var b strings.Builder
	for k, n := range answered {
		fmt.Fprintf(&b, " %s %d (%d, %d)", kindNames[k], n[0], n[1], n[2])
	}
	return b.String()
}

// both runs the operation on the two servers at once (each side has its own state;
// st is only read), so that a sequence takes the slower server's time, not the sum.
func both(etcd, keel func() result) (result, result) {
	var kr result
	done := make(chan struct{})
	go func() { kr = keel(); close(done) }()
	er := etcd()
	<-done
	return er, kr
}
