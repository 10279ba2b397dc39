package etcdchaos

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/anishathalye/porcupine"
	"github.com/keel-kv/keel/chaos"
	"github.com/keel-kv/keel/kv/api"
)

// The checker's self-test: histories built from etcd answers the way the workload
// builds them (FillGet, FillTxn, FillPage, Classify), judged by Judge. A clean
// history must pass, and each history with one thing wrong must fail for that reason.

func hdr(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

func kv(key, value string, mod int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), ModRevision: mod, CreateRevision: mod}
}

func getResp(rev int64, kvs ...*mvccpb.KeyValue) *clientv3.GetResponse {
	return (*clientv3.GetResponse)(&pb.RangeResponse{Header: hdr(rev), Kvs: kvs, Count: int64(len(kvs))})
}

// story is a small history: who did what when, and what etcd answered.
type story struct {
	t       *testing.T
	records []chaos.Record
}

func (s *story) add(r chaos.Record, call, ret int64, err error) {
	r.Call, r.Return, r.Node = call, ret, "n1"
	r.Outcome = Classify(err, r.IsWrite())
	if err != nil {
		r.Err = err.Error()
	}
	r.ID = len(s.records)
	s.records = append(s.records, r)
}

func (s *story) get(client int, key string, call, ret int64, resp *clientv3.GetResponse) {
	r := chaos.Record{Client: client, Kind: chaos.OpGet, Key: key}
	if err := FillGet(&r, resp); err != nil {
		s.t.Fatal(err)
	}
	s.add(r, call, ret, nil)
}

// cleanStory: put, read, CAS, read, txn over two keys, a paged scan, a delete, the
// final reads; and the MVCC history that goes with it (revisions 2..5).
func cleanStory(t *testing.T) (*story, []map[string]api.KV) {
	s := &story{t: t}
	s.add(chaos.Record{Client: 0, Kind: chaos.OpPut, Key: "k/0", Value: "a", Rev: 2}, 0, 10, nil)
	s.get(1, "k/0", 20, 30, getResp(2, kv("k/0", "a", 2)))
	s.add(chaos.Record{Client: 0, Kind: chaos.OpCAS, Key: "k/0", Value: "b", PrevRev: 2, Succeeded: true, Rev: 3}, 40, 50, nil)
	s.get(1, "k/0", 60, 70, getResp(3, kv("k/0", "b", 3)))
	txn := chaos.Record{Client: 2, Kind: chaos.OpTxn, Key: "k/0", Key2: "k/1", Value: "c", Value2: "d", PrevRev: 3}
	if err := FillTxn(&txn, (*clientv3.TxnResponse)(&pb.TxnResponse{Header: hdr(4), Succeeded: true})); err != nil {
		t.Fatal(err)
	}
	s.add(txn, 80, 90, nil)
	sc := chaos.Record{Client: 1, Kind: chaos.OpScan, Prefix: "k/", Limit: 1}
	for page, resp := range []*clientv3.GetResponse{getResp(4, kv("k/0", "c", 4)), getResp(4, kv("k/1", "d", 4))} {
		if err := FillPage(&sc, page, resp); err != nil {
			t.Fatal(err)
		}
	}
	s.add(sc, 100, 110, nil)
	s.add(chaos.Record{Client: 0, Kind: chaos.OpDelete, Key: "k/1", Rev: 5, Deleted: 1}, 120, 130, nil)
	s.get(chaos.FinalClient, "k/0", 140, 150, getResp(5, kv("k/0", "c", 4)))
	s.get(chaos.FinalClient, "k/1", 160, 170, getResp(5))
	states := []map[string]api.KV{1: {}, 2: {"k/0": {Key: "k/0", Value: []byte("a"), ModRevision: 2}},
		3: {"k/0": {Key: "k/0", Value: []byte("b"), ModRevision: 3}},
		4: {"k/0": {Key: "k/0", Value: []byte("c"), ModRevision: 4}, "k/1": {Key: "k/1", Value: []byte("d"), ModRevision: 4}},
		5: {"k/0": {Key: "k/0", Value: []byte("c"), ModRevision: 4}}}
	return s, states
}

// judge checks the story with every node holding the final keyspace (nodes), as
// Run's checks would.
func judge(records []chaos.Record, states []map[string]api.KV, nodes []chaos.NodeState) (chaos.Report, []string) {
	tl := chaos.DiffStates(states, 1, int64(len(states)-1))
	rep, _, problems := Judge(RunData{Records: records, Timeline: tl, Nodes: nodes}, DefaultWorkload(), chaos.Floors{})
	return rep, problems
}

// finalNodes is three nodes that each hold the clean story's last state.
func finalNodes() []chaos.NodeState {
	var out []chaos.NodeState
	for _, id := range []string{"n1", "n2", "n3"} {
		out = append(out, chaos.NodeState{Node: id, Revision: 5,
			KVs: []api.KV{{Key: "k/0", Value: []byte("c"), CreateRevision: 2, ModRevision: 4, Version: 3}}})
	}
	return out
}

func TestCheckerPassesCleanHistory(t *testing.T) {
	s, states := cleanStory(t)
	if rep, problems := judge(s.records, states, finalNodes()); !rep.OK() || len(problems) > 0 {
		t.Fatalf("clean history failed: %s %v %v", rep, rep.Violations, problems)
	}
}

func TestCheckerCatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(s *story, states []map[string]api.KV, nodes []chaos.NodeState)
		want   string // a violation or problem containing this; "" = porcupine says illegal
	}{
		{"stale read", func(s *story, _ []map[string]api.KV, _ []chaos.NodeState) {
			// The read after the CAS returned shows the value the CAS replaced.
			if err := FillGet(&s.records[3], getResp(3, kv("k/0", "a", 2))); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"acknowledged write lost", func(_ *story, states []map[string]api.KV, _ []chaos.NodeState) {
			// Revision 3 (the CAS to "b") is not in the store's history.
			states[3] = states[2]
		}, "acknowledged write lost"},
		{"value nobody wrote", func(s *story, _ []map[string]api.KV, _ []chaos.NodeState) {
			s.records[1].GotValue = "z"
		}, ""},
		{"write said not applied but applied", func(s *story, _ []map[string]api.KV, _ []chaos.NodeState) {
			// etcd's "no leader" means the write never reached the log; a later read
			// sees it anyway.
			s.records[2].Outcome = Classify(rpctypes.ErrNoLeader, true)
		}, ""},
		{"scan page over its limit", func(s *story, _ []map[string]api.KV, _ []chaos.NodeState) {
			s.records[5].PageSizes = []int{2}
		}, "limit"},
		{"final read lost the last write", func(s *story, _ []map[string]api.KV, _ []chaos.NodeState) {
			s.records[7].GotValue, s.records[7].ModRev = "b", 3
		}, ""},
		{"a node lost the last write", func(_ *story, _ []map[string]api.KV, nodes []chaos.NodeState) {
			nodes[1].KVs[0].Value, nodes[1].KVs[0].ModRevision = []byte("b"), 3
		}, "node n2: acknowledged write lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, states := cleanStory(t)
			nodes := finalNodes()
			tc.mutate(s, states, nodes)
			rep, problems := judge(s.records, states, nodes)
			if rep.OK() && len(problems) == 0 {
				t.Fatalf("checker passed a broken history: %s", rep)
			}
			if tc.want == "" && rep.Linearizable != porcupine.Illegal {
				t.Fatalf("want a linearizability violation, got %s %v", rep.Linearizable, rep.Violations)
			}
			if all := strings.Join(append(rep.Violations, problems...), "\n"); tc.want != "" && !strings.Contains(all, tc.want) {
				t.Fatalf("want a violation with %q, got %s", tc.want, all)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	for _, tc := range []struct {
		err   error
		write bool
		want  chaos.Outcome
	}{
		{nil, true, chaos.OutcomeOK},
		{rpctypes.ErrGRPCNoLeader, true, chaos.OutcomeFailed},
		{rpctypes.ErrGRPCLeaderChanged, true, chaos.OutcomeFailed},
		{rpctypes.ErrGRPCTimeout, true, chaos.OutcomeUnknown},
		{ctx.Err(), true, chaos.OutcomeUnknown},
		{rpctypes.ErrGRPCTimeout, false, chaos.OutcomeFailed},
	} {
		if got := Classify(tc.err, tc.write); got != tc.want {
			t.Errorf("Classify(%v, write=%t) = %s, want %s", tc.err, tc.write, got, tc.want)
		}
	}
}
