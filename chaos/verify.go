package chaos

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// WaitAllReady polls until every member answers its status with a known leader and
// its log applied up to the commit index it knows.
func WaitAllReady(ctx context.Context, c Cluster) error {
	for {
		var notReady []string
		for _, id := range c.Members() {
			if !Ready(ctx, c.Client(id)) {
				notReady = append(notReady, id)
			}
		}
		if len(notReady) == 0 {
			return nil
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("nodes %v not ready: %w", notReady, ctx.Err())
		}
	}
}

// Converge waits until every member reports the same applied index and revision, then
// lists the whole keyspace at that revision from each node's local state
// (serializable) and compares the lists. It returns the common revision.
func Converge(ctx context.Context, c Cluster) (int64, error) {
	var last string
	for {
		sts := Statuses(ctx, c)
		if rev, ok := sameState(c.Members(), sts); ok {
			return rev, compareKeyspaces(ctx, c, rev)
		}
		last = describeStatuses(sts)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return 0, fmt.Errorf("nodes did not converge: %s: %w", last, ctx.Err())
		}
	}
}

func sameState(members []string, sts map[string]*api.StatusResponse) (int64, bool) {
	var idx uint64
	var rev int64
	for i, id := range members {
		st, ok := sts[id]
		if !ok || st.LeaderID == "" {
			return 0, false
		}
		if i == 0 {
			idx, rev = st.AppliedIndex, st.Revision
		} else if st.AppliedIndex != idx || st.Revision != rev {
			return 0, false
		}
	}
	return rev, len(members) > 0
}

func describeStatuses(sts map[string]*api.StatusResponse) string {
	ids := sortedKeys(sts)
	s := ""
	for _, id := range ids {
		st := sts[id]
		s += fmt.Sprintf("[%s %s leader=%s term=%d applied=%d commit=%d rev=%d] ",
			id, st.State, st.LeaderID, st.Term, st.AppliedIndex, st.CommitIndex, st.Revision)
	}
	return s
}

// compareKeyspaces lists every key at rev on every member and reports the first
// difference.
func compareKeyspaces(ctx context.Context, c Cluster, rev int64) error {
	var first []api.KV
	var firstID string
	for _, id := range c.Members() {
		kvs, err := listAll(ctx, c.Client(id), rev)
		if err != nil {
			return fmt.Errorf("list keyspace of %s at revision %d: %w", id, rev, err)
		}
		if firstID == "" {
			first, firstID = kvs, id
			continue
		}
		if !reflect.DeepEqual(first, kvs) {
			return fmt.Errorf("keyspaces differ at revision %d: %s has %d keys %s, %s has %d keys %s",
				rev, firstID, len(first), summarize(first), id, len(kvs), summarize(kvs))
		}
	}
	return nil
}

func listAll(ctx context.Context, cl *client.Client, rev int64) ([]api.KV, error) {
	var out []api.KV
	opts := client.ListOptions{Limit: 1000, Revision: rev, Serializable: true}
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cl.List(lctx, "", opts)
		cancel()
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Items...)
		if resp.Continue == "" {
			return out, nil
		}
		opts.Continue = resp.Continue
	}
}

func summarize(kvs []api.KV) string {
	s := ""
	for i, kv := range kvs {
		if i == 6 {
			return s + "..."
		}
		s += fmt.Sprintf("%s=%q@%d ", kv.Key, kv.Value, kv.ModRevision)
	}
	return s
}

// FinalWrite writes a fresh value through any member until one acknowledges it.
func FinalWrite(ctx context.Context, c Cluster, h *History, key, value string) error {
	var lastErr error
	for attempt := 0; ; attempt++ {
		members := c.Members()
		id := members[attempt%len(members)]
		r := Record{Client: FinalClient, Node: id, Incarnation: c.Incarnation(id), Kind: OpPut, Key: key, Value: value, Call: h.Now()}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rev, err := c.Client(id).Put(wctx, key, []byte(value))
		cancel()
		r.Return, r.Rev, r.Outcome = h.Now(), rev, classify(err, true)
		if err != nil {
			r.Err = err.Error()
		}
		h.Add(r)
		if err == nil {
			return nil
		}
		lastErr = err
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return fmt.Errorf("final write of %s never acknowledged: %w", key, lastErr)
		}
		if r.Outcome == OutcomeUnknown {
			value += "+" // values stay unique: the unknown write may still apply
		}
	}
}

// FinalReads reads every key linearizably (any member, retried until one answers) and
// records the reads as FinalClient operations, for the durability check.
func FinalReads(ctx context.Context, c Cluster, h *History, keys []string) error {
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	for i, key := range sorted {
		for attempt := 0; ; attempt++ {
			members := c.Members()
			id := members[(i+attempt)%len(members)]
			r := Record{Client: FinalClient, Node: id, Incarnation: c.Incarnation(id), Kind: OpGet, Key: key, Call: h.Now()}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := doGet(rctx, c.Client(id), &r)
			cancel()
			r.Return, r.Outcome = h.Now(), classify(err, false)
			if err == nil {
				h.Add(r)
				break
			}
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return fmt.Errorf("final read of %s: %w", key, err)
			}
		}
	}
	return nil
}
