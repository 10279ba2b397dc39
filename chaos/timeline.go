package chaos

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// RevChange is what one revision changed: the keys it wrote (with their values) and
// the keys it deleted.
type RevChange struct {
	Puts    map[string]string
	Deletes []string
}

// Timeline is the store's own MVCC history, read back revision by revision after a
// run: the committed order of every write. From is the first revision it covers (1
// when nothing was compacted), To the last.
type Timeline struct {
	From, To int64
	Changes  map[int64]*RevChange
}

// ReadTimeline lists the whole keyspace at every revision in [1, to] from one node's
// local state and diffs consecutive revisions. Revisions that are compacted are
// skipped (From says where the history starts).
func ReadTimeline(ctx context.Context, cl *client.Client, to int64) (*Timeline, error) {
	return ReadTimelineWith(ctx, to, func(ctx context.Context, r int64) (map[string]api.KV, error) {
		kvs, err := listAll(ctx, cl, r)
		if err != nil {
			return nil, err
		}
		m := make(map[string]api.KV, len(kvs))
		for _, kv := range kvs {
			m[kv.Key] = kv
		}
		return m, nil
	}, client.IsCompacted)
}

// ReadTimelineWith is ReadTimeline over any door: keyspaceAt reads the whole keyspace
// at a revision (four revisions at a time), compacted tells a compacted revision's
// error, which skips it.
func ReadTimelineWith(ctx context.Context, to int64, keyspaceAt func(context.Context, int64) (map[string]api.KV, error),
	compacted func(error) bool) (*Timeline, error) {
	states := make([]map[string]api.KV, to+1)
	var mu sync.Mutex
	var firstErr error
	compactedBelow := int64(0)
	revs := make(chan int64)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range revs {
				m, err := keyspaceAt(ctx, r)
				mu.Lock()
				switch {
				case compacted(err):
					compactedBelow = max(compactedBelow, r)
				case err != nil && firstErr == nil:
					firstErr = fmt.Errorf("keyspace at revision %d: %w", r, err)
				case err == nil:
					states[r] = m
				}
				mu.Unlock()
			}
		}()
	}
	for r := int64(1); r <= to && ctx.Err() == nil; r++ {
		revs <- r
	}
	close(revs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return DiffStates(states, compactedBelow+1, to), nil
}

// DiffStates turns the keyspace at each revision (states[r], r in [from, to]) into
// per-revision changes; other doors' histories (chaos/etcd) are read back with it too.
func DiffStates(states []map[string]api.KV, from, to int64) *Timeline {
	tl := &Timeline{From: from, To: to, Changes: map[int64]*RevChange{}}
	prev := map[string]api.KV{}
	if from > 1 {
		prev = nil
	}
	for r := from; r <= to; r++ {
		cur := states[r]
		ch := &RevChange{Puts: map[string]string{}}
		for k, kv := range cur {
			if kv.ModRevision == r {
				ch.Puts[k] = string(kv.Value)
			}
		}
		for k := range prev {
			if _, ok := cur[k]; !ok {
				ch.Deletes = append(ch.Deletes, k)
			}
		}
		sort.Strings(ch.Deletes)
		if prev != nil {
			tl.Changes[r] = ch
		}
		prev = cur
	}
	return tl
}

// Last is the last revision the timeline covers (0 for a nil timeline).
func (tl *Timeline) Last() int64 {
	if tl == nil {
		return 0
	}
	return tl.To
}

// Complete says whether the timeline starts at the first revision.
func (tl *Timeline) Complete() bool { return tl != nil && tl.From <= 1 }

// Resolve uses the store's MVCC history to settle what clients could not see, and
// checks it against what they were told:
//
//   - an acknowledged write must be in the history at its revision with its value
//     (no acknowledged write lost, found directly rather than through later reads);
//   - every value in the history under the workload's prefix was written by a client;
//   - a transaction's two writes are both at one revision or neither is;
//   - an unknown-outcome put, CAS or txn whose value is in the history took effect at
//     that revision (marked Late: it may have taken effect after its client gave up);
//     one whose value is nowhere never took effect and is marked failed;
//   - an unknown delete of a key the history shows no unexplained deletion of had no
//     effect and is marked failed.
//
// It returns the resolved copy of records and the violations found.
func Resolve(records []Record, tl *Timeline, prefix string) ([]Record, []string) {
	out := append([]Record(nil), records...)
	if tl == nil {
		return out, nil
	}
	type at struct {
		key string
		rev int64
	}
	// Only the workload's values (under prefix, never empty) are looked up: keys
	// outside it (the lease checker's lock keys, with empty values) must not match a
	// put's empty Value2.
	where := map[string]at{}
	for r, ch := range tl.Changes {
		for k, v := range ch.Puts {
			if v != "" && strings.HasPrefix(k, prefix) {
				where[v] = at{k, r}
			}
		}
	}
	var v []string
	v = append(v, checkAcked(out, tl)...)
	v = append(v, checkPhantoms(out, tl, prefix)...)
	unexplained := unexplainedDeletes(out, tl)
	clock := newRevClock(out)
	for i := range out {
		r := &out[i]
		if r.Outcome != OutcomeUnknown || !r.IsWrite() {
			continue
		}
		switch r.Kind {
		case OpPut, OpCAS, OpTxn:
			a, okA := where[r.Value]
			b, okB := where[r.Value2]
			if r.Kind == OpTxn && okA != okB || okA && okB && a.rev != b.rev {
				v = append(v, fmt.Sprintf("txn #%d applied partially: %s=%q at %v, %s=%q at %v", r.ID, r.Key, r.Value, a, r.Key2, r.Value2, b))
			}
			switch {
			case okA:
				r.Outcome, r.Succeeded, r.Rev, r.Late = OutcomeOK, true, a.rev, true
				r.Return = max(r.Call, clock.seenBy(a.rev))
			case tl.Complete():
				r.Outcome = OutcomeFailed
				r.Err += "; never applied (not in the MVCC history)"
			}
		case OpDelete:
			if tl.Complete() && !anyAfter(unexplained[r.Key], clock.before(r.Call)) {
				r.Outcome = OutcomeFailed
				r.Err += "; no effect (the MVCC history has no unexplained delete of the key)"
			}
		}
	}
	return out, v
}

// checkAcked checks that every acknowledged write is in the history.
func checkAcked(records []Record, tl *Timeline) []string {
	var v []string
	for i := range records {
		r := &records[i]
		if r.Outcome != OutcomeOK || !r.IsWrite() || r.Late || r.Rev < tl.From || r.Rev > tl.To {
			continue
		}
		ch := tl.Changes[r.Rev]
		lost := func(key, what string) {
			v = append(v, fmt.Sprintf("acknowledged write lost: #%d %s %s (revision %d) is not in the MVCC history; revision %d shows %s",
				r.ID, what, key, r.Rev, r.Rev, describeChange(ch)))
		}
		switch {
		case r.Kind == OpPut, r.Kind == OpCAS && r.Succeeded, r.Kind == OpTxn && r.Succeeded:
			if ch == nil || ch.Puts[r.Key] != r.Value {
				lost(r.Key, fmt.Sprintf("%s %q to", r.Kind, r.Value))
			}
			if r.Kind == OpTxn && (ch == nil || ch.Puts[r.Key2] != r.Value2) {
				lost(r.Key2, fmt.Sprintf("txn %q to", r.Value2))
			}
		case r.Kind == OpDelete && r.Deleted > 0:
			if ch == nil || !contains(ch.Deletes, r.Key) {
				lost(r.Key, "delete of")
			}
		}
	}
	return v
}

// checkPhantoms finds values under prefix that no client wrote.
func checkPhantoms(records []Record, tl *Timeline, prefix string) []string {
	written := map[string]bool{}
	for _, r := range records {
		if r.IsWrite() {
			written[r.Value], written[r.Value2] = true, true
		}
	}
	var v []string
	for r := tl.From; r <= tl.To; r++ {
		ch := tl.Changes[r]
		if ch == nil {
			continue
		}
		for k, val := range ch.Puts {
			if strings.HasPrefix(k, prefix) && !written[val] {
				v = append(v, fmt.Sprintf("MVCC history has %s=%q at revision %d, which no client wrote", k, val, r))
			}
		}
	}
	return v
}

// unexplainedDeletes lists, per key, the revisions of deletions in the history that no
// acknowledged delete accounts for.
func unexplainedDeletes(records []Record, tl *Timeline) map[string][]int64 {
	acked := map[string]map[int64]bool{}
	for _, r := range records {
		if r.Kind == OpDelete && r.Outcome == OutcomeOK && r.Deleted > 0 {
			if acked[r.Key] == nil {
				acked[r.Key] = map[int64]bool{}
			}
			acked[r.Key][r.Rev] = true
		}
	}
	out := map[string][]int64{}
	for rev, ch := range tl.Changes {
		for _, k := range ch.Deletes {
			if !acked[k][rev] {
				out[k] = append(out[k], rev)
			}
		}
	}
	return out
}

func anyAfter(revs []int64, lb int64) bool {
	for _, r := range revs {
		if r > lb {
			return true
		}
	}
	return false
}

// revClock relates revisions to the history's clock through the operations that
// reported one: revision r existed before any operation that reported a revision >= r
// returned, and was assigned after any operation that reported it had returned.
type revClock struct {
	byRev  []revAt // ascending rev; minRet[i] = min ret over byRev[i:]
	minRet []int64
	byRet  []revAt // ascending ret; maxRev[i] = max rev over byRet[:i+1]
	maxRev []int64
}

type revAt struct{ rev, ret int64 }

func newRevClock(records []Record) *revClock {
	var pts []revAt
	for _, r := range records {
		if r.Outcome == OutcomeOK && !r.Late && r.Rev > 0 {
			pts = append(pts, revAt{r.Rev, r.Return})
		}
	}
	c := &revClock{byRev: append([]revAt(nil), pts...), byRet: pts}
	sort.Slice(c.byRev, func(i, j int) bool { return c.byRev[i].rev < c.byRev[j].rev })
	sort.Slice(c.byRet, func(i, j int) bool { return c.byRet[i].ret < c.byRet[j].ret })
	c.minRet = make([]int64, len(c.byRev))
	for i := len(c.byRev) - 1; i >= 0; i-- {
		c.minRet[i] = c.byRev[i].ret
		if i+1 < len(c.byRev) && c.minRet[i+1] < c.minRet[i] {
			c.minRet[i] = c.minRet[i+1]
		}
	}
	c.maxRev = make([]int64, len(c.byRet))
	for i, p := range c.byRet {
		c.maxRev[i] = p.rev
		if i > 0 && c.maxRev[i-1] > p.rev {
			c.maxRev[i] = c.maxRev[i-1]
		}
	}
	return c
}

// seenBy is the earliest return of an operation that reported a revision >= rev
// (math.MaxInt64 when none: the write is pending to the end).
func (c *revClock) seenBy(rev int64) int64 {
	i := sort.Search(len(c.byRev), func(i int) bool { return c.byRev[i].rev >= rev })
	if i == len(c.byRev) {
		return math.MaxInt64
	}
	return c.minRet[i]
}

// before is the highest revision reported by an operation that returned before t: a
// write invoked at t gets a higher revision.
func (c *revClock) before(t int64) int64 {
	i := sort.Search(len(c.byRet), func(i int) bool { return c.byRet[i].ret >= t })
	if i == 0 {
		return 0
	}
	return c.maxRev[i-1]
}

func describeChange(ch *RevChange) string {
	if ch == nil {
		return "nothing"
	}
	var parts []string
	for _, k := range sortedKeys(ch.Puts) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, ch.Puts[k]))
	}
	for _, k := range ch.Deletes {
		parts = append(parts, "delete "+k)
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
