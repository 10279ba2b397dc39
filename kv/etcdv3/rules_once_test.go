package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Rules live once: every core refusal the HTTP door's table (kv.WireError)
// classifies as something other than 500 must not reach an etcd client as
// codes.Unknown, which clientv3 neither retries nor recognises (found by an audit:
// kv.ErrTooManyLeases, raft.ErrCallerRefused and versions.ErrUndecodable did).
func TestEtcdErrorCoversCoreRefusals(t *testing.T) {
	for _, err := range []error{
		kv.ErrTooManyLeases, raft.ErrCallerRefused, versions.ErrUndecodable,
		kv.ErrInvalidKey, kv.ErrInvalidBody, kv.ErrReservedPrefix, kv.ErrTooManyRequests, kv.ErrTooManyConnections,
	} {
		wrapped := fmt.Errorf("apply: %w", err)
		if kv.WireError(wrapped, true).Code == http.StatusInternalServerError {
			continue
		}
		if got := status.Convert(etcdError(wrapped)); got.Code() == codes.Unknown {
			t.Errorf("%v: HTTP answers %d %s, the etcd door codes.Unknown %q", err,
				kv.WireError(wrapped, true).Code, kv.WireError(wrapped, true).Reason, got.Message())
		}
	}
}

// The core's Txn holds the ops it is handed to the limits (key length, UTF-8, value
// size) itself: a door that forgets CheckOp still writes nothing every other door
// refuses (an audit found the oversized value and the non-UTF-8 key applied).
func TestCoreTxnChecksLimits(t *testing.T) {
	cfg := kv.DefaultConfig()
	cfg.MaxKeyBytes, cfg.MaxValueBytes = 8, 8
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]fsm.Op{
		"long value": {Type: fsm.OpPut, Key: []byte("k"), Value: []byte(strings.Repeat("v", 64))},
		"long key":   {Type: fsm.OpPut, Key: []byte(strings.Repeat("k", 64)), Value: []byte("v")},
		"not UTF-8":  {Type: fsm.OpPut, Key: []byte("\xff\xfe"), Value: []byte("v")},
		"empty key":  {Type: fsm.OpPut, Key: []byte{}, Value: []byte("v")},
	} {
		_, err := core.Txn(context.Background(), kv.Caller{}, &fsm.Txn{Success: []fsm.Op{op}}, kv.TxnOptions{})
		if !errors.Is(err, kv.ErrInvalidKey) && !errors.Is(err, kv.ErrTooLarge) {
			t.Errorf("%s: core Txn answered %v, want ErrInvalidKey or ErrTooLarge", name, err)
		}
	}
}

// The lease ID rule (a positive int64) lives in the core: a revoke, keepalive or
// time-to-live of an ID no lease can have is refused there (kv.ErrInvalidLeaseID)
// before any round trip, and the etcd door answers it as etcd does (lease not found).
func TestCoreChecksLeaseID(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := etcdLease{e: &Server{core: core}}
	for _, id := range []int64{-1, 0, math.MinInt64} {
		if _, err := core.LeaseRevoke(context.Background(), kv.Caller{}, id); !errors.Is(err, kv.ErrInvalidLeaseID) {
			t.Errorf("core LeaseRevoke(%d) = %v, want ErrInvalidLeaseID", id, err)
		}
		if _, err := core.LeaseKeepAlive(context.Background(), kv.Caller{}, id); !errors.Is(err, kv.ErrInvalidLeaseID) {
			t.Errorf("core LeaseKeepAlive(%d) = %v, want ErrInvalidLeaseID", id, err)
		}
		if _, err := core.LeaseTimeToLive(context.Background(), kv.Caller{}, id); !errors.Is(err, kv.ErrInvalidLeaseID) {
			t.Errorf("core LeaseTimeToLive(%d) = %v, want ErrInvalidLeaseID", id, err)
		}
		_, err := l.LeaseRevoke(context.Background(), &pb.LeaseRevokeRequest{ID: id})
		if got := status.Convert(etcdError(err)); got.Code() != codes.NotFound {
			t.Errorf("etcd LeaseRevoke(%d): %v %q, want NotFound as etcd", id, got.Code(), got.Message())
		}
	}
}

// The etcd door hides keel's records from Range, Txn ranges and watches
// (kv.Server.Hidden, applied in the door: kv.go shapeRange, watch.go pump), and the
// core refuses a compare over a range overlapping them, but a compare on one hidden
// key is served: it tells an etcd client that the key exists (and its version, value).
// (Found by an audit: the compare was served.)
func TestEtcdCompareOnHiddenKey(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	hidden := []byte(versions.SystemPrefix + "audit")
	if res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Success: []fsm.Op{{Type: fsm.OpPut, Key: hidden, Value: []byte("x")}}}}); err != nil || res.Err != nil {
		t.Fatalf("load: %v %v", err, res)
	}
	k := etcdKV{e: &Server{core: core}}
	rr, err := k.Range(context.Background(), &pb.RangeRequest{Key: hidden})
	if err != nil || len(rr.Kvs) != 0 {
		t.Fatalf("Range of the hidden key: %v, %v (want it hidden)", rr, err)
	}
	resp, err := k.Txn(context.Background(), &pb.TxnRequest{Compare: []*pb.Compare{{Key: hidden,
		Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}}})
	if err == nil && resp.Succeeded {
		t.Fatal("a compare on a key the door hides from Range succeeded: it reveals the key exists")
	}
}

// The empty-key rule lives in the core (kv.ErrEmptyKey, from its key check): the
// door keeps no copy, and maps the core's refusal to etcd's own "key is not provided"
// on every request that names a key — Range, Put, DeleteRange, a Txn's compare and
// its ops (kills: the core's check or the door's mapping dropped).
func TestEtcdEmptyKeyRuleIsTheCores(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CheckOp(api.Op{Type: api.OpPut, Value: []byte("v")}); !errors.Is(err, kv.ErrEmptyKey) {
		t.Errorf("core CheckOp of an empty key = %v, want ErrEmptyKey", err)
	}
	if _, err := core.CheckCompare(api.Compare{Target: api.TargetVersion, Result: api.ResultEqual}, nil); !errors.Is(err, kv.ErrEmptyKey) {
		t.Errorf("core CheckCompare of an empty key = %v, want ErrEmptyKey", err)
	}
	k := etcdKV{e: &Server{core: core}}
	ctx := context.Background()
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Value: []byte("v")}}}
	get := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{RangeEnd: []byte{0}}}}
	for name, call := range map[string]func() error{
		"range":        func() error { _, err := k.Range(ctx, &pb.RangeRequest{}); return err },
		"range to end": func() error { _, err := k.Range(ctx, &pb.RangeRequest{RangeEnd: []byte{0}}); return err },
		"put":          func() error { _, err := k.Put(ctx, &pb.PutRequest{Value: []byte("v")}); return err },
		"put ignoring the value it carries": func() error { // etcd checks the key first
			_, err := k.Put(ctx, &pb.PutRequest{Value: []byte("v"), IgnoreValue: true})
			return err
		},
		"delete": func() error { _, err := k.DeleteRange(ctx, &pb.DeleteRangeRequest{}); return err },
		"txn compare": func() error {
			_, err := k.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Target: pb.Compare_VERSION,
				TargetUnion: &pb.Compare_Version{Version: 0}}}})
			return err
		},
		"txn put": func() error { _, err := k.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put}}); return err },
		"txn get": func() error { _, err := k.Txn(ctx, &pb.TxnRequest{Failure: []*pb.RequestOp{get}}); return err },
	} {
		got, want := status.Convert(etcdError(call())), status.Convert(rpctypes.ErrGRPCEmptyKey)
		if got.Code() != want.Code() || got.Message() != want.Message() {
			t.Errorf("%s of an empty key: %v %q, want etcd's %v %q", name, got.Code(), got.Message(), want.Code(), want.Message())
		}
	}
}

// `etcdctl del "" --from-key` (key "\x00", range_end "\x00") wipes every key an etcd
// client can see, as one revision, and keel's own records stay: the door hides them,
// so the delete goes around them (the core's carveReserved). The answer is one
// DeleteRange's: the deleted count and prev_kvs of the keys around, in key order. A
// Txn holding the same delete answers the same shape. (Refused with permission denied
// before: the range overlapped keel's records.)
func TestEtcdWipeAllKeepsKeelsRecords(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	hidden := []byte(versions.SystemPrefix + "audit")
	load := func() {
		t.Helper()
		if res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
			{Type: fsm.OpPut, Key: []byte("\x00a"), Value: []byte("1")}, {Type: fsm.OpPut, Key: hidden, Value: []byte("x")},
			{Type: fsm.OpPut, Key: []byte("a"), Value: []byte("2")}, {Type: fsm.OpPut, Key: []byte("z"), Value: []byte("3")}}}}); err != nil || res.Err != nil {
			t.Fatalf("load: %v %v", err, res)
		}
	}
	k := etcdKV{e: &Server{core: core}}
	ctx := context.Background()
	check := func(what string, deleted int64, prev []*mvccpb.KeyValue, rev int64) {
		t.Helper()
		var keys []string
		for _, kv := range prev {
			keys = append(keys, string(kv.Key))
		}
		if deleted != 3 || fmt.Sprint(keys) != fmt.Sprint([]string{"\x00a", "a", "z"}) {
			t.Errorf("%s: deleted %d, prev_kvs %q; want 3: \\x00a a z", what, deleted, keys)
		}
		v := store.FSM().View()
		if v.Revision() != rev {
			t.Errorf("%s: at revision %d, want %d (one revision)", what, v.Revision(), rev)
		}
		if kv, err := v.Get(hidden, 0); err != nil || string(kv.Value) != "x" {
			t.Errorf("%s: keel's record after the wipe: %v %v", what, kv, err)
		}
		if n := v.Len(); n != 1 {
			t.Errorf("%s: %d keys left, want keel's record alone", what, n)
		}
	}

	load()
	dr, err := k.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, PrevKv: true})
	if err != nil {
		t.Fatalf("del \"\" --from-key: %v", err)
	}
	check("DeleteRange", dr.Deleted, dr.PrevKvs, store.FSM().View().Revision())
	if rev := store.FSM().View().Revision(); dr.Header.Revision != rev {
		t.Errorf("DeleteRange header revision %d, want %d", dr.Header.Revision, rev)
	}

	load()
	tr, err := k.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}},
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, PrevKv: true}}},
	}})
	if err != nil || len(tr.Responses) != 2 {
		t.Fatalf("Txn with the wipe: %v %v", tr, err)
	}
	if got := tr.Responses[0].GetResponseRange(); got == nil || len(got.Kvs) != 1 {
		t.Errorf("Txn's range before the wipe: %v", tr.Responses[0])
	}
	d := tr.Responses[1].GetResponseDeleteRange()
	if d == nil {
		t.Fatalf("Txn's second answer %v, want the DeleteRange's", tr.Responses[1])
	}
	check("Txn", d.Deleted, d.PrevKvs, store.FSM().View().Revision())

	// A delete wholly inside keel's records is still refused, and changes nothing.
	rev := store.FSM().View().Revision()
	if _, err := k.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(versions.SystemPrefix), RangeEnd: fsm.PrefixEnd([]byte(versions.SystemPrefix))}); err == nil {
		t.Error("a delete of keel's records alone was served")
	}
	if got := store.FSM().View().Revision(); got != rev {
		t.Errorf("the refused delete moved the revision %d → %d", rev, got)
	}
}
