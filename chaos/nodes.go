package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// NodeState is one node's whole keyspace at Revision, listed from its local state
// (serializable) once the node had applied the leader's commit index: what that node
// would serve if it were the only one left.
type NodeState struct {
	Node     string
	Applied  uint64 // the node's applied index when it was read
	Revision int64
	KVs      []api.KV
}

// Hash is a digest of the keyspace: every key with its value, create and mod
// revisions and version, in key order.
func (s NodeState) Hash() string {
	kvs := append([]api.KV(nil), s.KVs...)
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].Key < kvs[j].Key })
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	num := func(v int64) {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	for _, kv := range kvs {
		field([]byte(kv.Key))
		field(kv.Value)
		num(kv.CreateRevision)
		num(kv.ModRevision)
		num(kv.Version)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ReadNodeStates takes the leader's commit index, waits (within ctx) until every
// member has applied it, and lists each member's keyspace at the leader's revision
// from its local state. Call it once traffic has stopped.
func ReadNodeStates(ctx context.Context, c Cluster) ([]NodeState, error) {
	leader, err := WaitLeader(ctx, c)
	if err != nil {
		return nil, err
	}
	var commit uint64
	var rev int64
	for {
		st, err := c.Client(leader).Status(ctx)
		if err == nil && st.AppliedIndex >= st.CommitIndex {
			commit, rev = st.CommitIndex, st.Revision
			break
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return nil, fmt.Errorf("leader %s never applied its commit index: %w", leader, ctx.Err())
		}
	}
	var out []NodeState
	for _, id := range c.Members() {
		s := NodeState{Node: id}
		for {
			st, err := c.Client(id).Status(ctx)
			if err == nil && st.AppliedIndex >= commit {
				s.Applied = st.AppliedIndex
				break
			}
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return out, fmt.Errorf("node %s did not apply the leader's commit index %d: %w", id, commit, ctx.Err())
			}
		}
		kvs, err := listAll(ctx, c.Client(id), rev)
		if err != nil {
			return out, fmt.Errorf("list keyspace of %s at revision %d: %w", id, rev, err)
		}
		s.Revision, s.KVs = rev, kvs
		out = append(out, s)
	}
	return out, nil
}

// Keyspace replays the timeline up to revision at: every key's value, create and mod
// revisions and version, sorted by key, as a node's local state would list it.
func (tl *Timeline) Keyspace(at int64) []api.KV {
	state := map[string]api.KV{}
	for r := tl.From; r <= min(at, tl.To); r++ {
		ch := tl.Changes[r]
		if ch == nil {
			continue
		}
		for _, k := range ch.Deletes {
			delete(state, k)
		}
		for k, v := range ch.Puts {
			kv, ok := state[k]
			if !ok {
				kv = api.KV{Key: k, CreateRevision: r}
			}
			kv.Value, kv.ModRevision = []byte(v), r
			kv.Version++
			state[k] = kv
		}
	}
	out := make([]api.KV, 0, len(state))
	for _, k := range sortedKeys(state) {
		out = append(out, state[k])
	}
	return out
}

// CheckNodes checks every node's final keyspace against the history (resolved, see
// Resolve) and, when it is complete, the MVCC history tl: on every node, the last
// acknowledged write of each key is there with its value and revision (or a later
// write is); every key and value was written by a client, at the revision the client
// was told; each key is as the MVCC history's last write to it left it; and all nodes
// hold the same keyspace (equal hashes) at one revision.
//
// Keys outside the workload's prefix (and the verifier's final key) — typed objects and
// keel's own records in an upgrade run — are no client's: they are checked against the
// MVCC history and across nodes only.
func CheckNodes(records []Record, tl *Timeline, states []NodeState, prefix string) []string {
	ix := indexWrites(records)
	keys := map[string]bool{}
	unknownDelete := map[string]bool{}
	for i := range records {
		r := &records[i]
		if !r.IsWrite() {
			continue
		}
		keys[r.Key] = true
		if r.Kind == OpTxn {
			keys[r.Key2] = true
		}
		if r.Kind == OpDelete && r.Outcome == OutcomeUnknown {
			unknownDelete[r.Key] = true
		}
	}
	var out []string
	for _, s := range states {
		have := map[string]api.KV{}
		for _, kv := range s.KVs {
			have[kv.Key] = kv
			if strings.HasPrefix(kv.Key, prefix) || kv.Key == finalKey {
				out = append(out, checkNodeKV(ix, keys, s, kv)...)
			}
		}
		if tl.Complete() && tl.To >= s.Revision {
			out = append(out, checkNodeTimeline(ix, tl, s, have)...)
		}
		for _, key := range sortedKeys(ix.byKey) {
			ws := ix.byKey[key]
			last := ws[len(ws)-1]
			kv, found := have[key]
			switch {
			case found && kv.ModRevision > last.rev:
			case found && kv.ModRevision == last.rev && !last.delete && string(kv.Value) == last.value:
			case !found && (last.delete || unknownDelete[key]):
			default:
				what := fmt.Sprintf("put %q", last.value)
				if last.delete {
					what = "delete"
				}
				got := "absent"
				if found {
					got = fmt.Sprintf("%q @%d", kv.Value, kv.ModRevision)
				}
				out = append(out, fmt.Sprintf("node %s: acknowledged write lost: #%d %s of %s at revision %d; the node's state at revision %d shows %s",
					s.Node, last.rec.ID, what, key, last.rev, s.Revision, got))
			}
		}
	}
	if len(states) > 1 {
		var parts []string
		same := true
		for _, s := range states {
			parts = append(parts, fmt.Sprintf("%s=%s@%d(%d keys)", s.Node, s.Hash(), s.Revision, len(s.KVs)))
			same = same && s.Revision == states[0].Revision && s.Hash() == states[0].Hash()
		}
		if !same {
			out = append(out, "node keyspaces differ: "+strings.Join(parts, " "))
		}
	}
	return out
}

// checkNodeKV checks one key of a node's state: a key and value some client wrote, at
// the revision its writer was told.
func checkNodeKV(ix writeIndex, keys map[string]bool, s NodeState, kv api.KV) []string {
	w, ok := ix.byValue[string(kv.Value)]
	switch {
	case !keys[kv.Key]:
		return []string{fmt.Sprintf("node %s holds key %s=%q @%d, a key no client wrote", s.Node, kv.Key, kv.Value, kv.ModRevision)}
	case !ok:
		return []string{fmt.Sprintf("node %s holds %s=%q @%d, a value no client wrote", s.Node, kv.Key, kv.Value, kv.ModRevision)}
	case w.Key != kv.Key && w.Key2 != kv.Key:
		return []string{fmt.Sprintf("node %s holds %s=%q, a value #%d wrote to %s", s.Node, kv.Key, kv.Value, w.ID, w.Key)}
	case w.Outcome == OutcomeOK && w.Rev != kv.ModRevision:
		return []string{fmt.Sprintf("node %s holds %s=%q @%d, but write #%d was acknowledged at revision %d",
			s.Node, kv.Key, kv.Value, kv.ModRevision, w.ID, w.Rev)}
	case kv.ModRevision > s.Revision:
		return []string{fmt.Sprintf("node %s holds %s=%q @%d, after the revision %d it was read at", s.Node, kv.Key, kv.Value, kv.ModRevision, s.Revision)}
	}
	return nil
}

// compareTimelines reads every other member's MVCC history up to want.To from its
// local state and compares it with want (read from node from): with acknowledged
// writes checked against want (Resolve), equal histories put every acknowledged write
// on every node, at its revision, with its value.
func compareTimelines(ctx context.Context, c Cluster, from string, want *Timeline) []string {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var out []string
	for _, id := range c.Members() {
		if id == from {
			continue
		}
		got, err := ReadTimeline(ctx, c.Client(id), want.To)
		if err != nil {
			out = append(out, fmt.Sprintf("read back node %s's MVCC history: %v", id, err))
			continue
		}
		out = append(out, DiffTimelines(from, want, id, got)...)
	}
	return out
}

// DiffTimelines reports the first revision, among those both histories cover, at which
// node b's MVCC history differs from node a's.
func DiffTimelines(a string, ta *Timeline, b string, tb *Timeline) []string {
	if ta.To != tb.To {
		return []string{fmt.Sprintf("node %s's MVCC history ends at revision %d, node %s's at %d", a, ta.To, b, tb.To)}
	}
	for r := max(ta.From, tb.From); r <= ta.To; r++ {
		ca, cb := ta.Changes[r], tb.Changes[r]
		if describeChange(ca) != describeChange(cb) {
			return []string{fmt.Sprintf("MVCC histories differ at revision %d: node %s shows %s, node %s shows %s",
				r, a, describeChange(ca), b, describeChange(cb))}
		}
	}
	return nil
}

// checkNodeTimeline compares a node's keyspace with the MVCC history's at the same
// revision, key by key.
func checkNodeTimeline(ix writeIndex, tl *Timeline, s NodeState, have map[string]api.KV) []string {
	var out []string
	want := map[string]bool{}
	for _, w := range tl.Keyspace(s.Revision) {
		want[w.Key] = true
		kv, ok := have[w.Key]
		if ok && kv.ModRevision == w.ModRevision && string(kv.Value) == string(w.Value) {
			continue
		}
		got := "absent"
		if ok {
			got = fmt.Sprintf("%q @%d", kv.Value, kv.ModRevision)
		}
		if r, acked := ix.byValue[string(w.Value)]; acked && r.Outcome == OutcomeOK {
			out = append(out, fmt.Sprintf("node %s: acknowledged write lost: #%d wrote %s=%q at revision %d (the MVCC history's last write to it); the node shows %s",
				s.Node, r.ID, w.Key, w.Value, w.ModRevision, got))
			continue
		}
		out = append(out, fmt.Sprintf("node %s: %s is %s, the MVCC history's last write to it is %q @%d", s.Node, w.Key, got, w.Value, w.ModRevision))
	}
	for _, kv := range s.KVs {
		if !want[kv.Key] {
			out = append(out, fmt.Sprintf("node %s holds %s=%q @%d, deleted or never written in the MVCC history at revision %d",
				s.Node, kv.Key, kv.Value, kv.ModRevision, s.Revision))
		}
	}
	return out
}
