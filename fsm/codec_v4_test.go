package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestCommandFormatV4 checks that EncodeCommand picks the oldest format a command needs
// (so voters of older releases keep applying everything else) and that format 4
// carries every new field through DecodeCommand.
func TestCommandFormatV4(t *testing.T) {
	leased := Op{Type: OpPut, Key: []byte("k"), Value: []byte("v"), Lease: 7}
	get := func(o RangeOptions) Op { return Op{Type: OpGet, Key: []byte("a"), End: []byte("b"), Range: o} }
	tests := []struct {
		name   string
		t      *Txn
		format byte
	}{
		{"plain", &Txn{Success: []Op{put("k", "v")}}, CommandFormatV1},
		{"tagged", &Txn{Success: []Op{tput("k", "v", "x/v1")}}, CommandFormatV2},
		{"leased", &Txn{Success: []Op{leased, tput("k", "v", "x/v1")}}, CommandFormatV3},
		{"nested", &Txn{Success: []Op{nested(nil, []Op{put("k", "v")}, nil)}}, CommandFormatV4},
		{"nested after a lease", &Txn{Failure: []Op{leased, nested(nil, nil, nil)}}, CommandFormatV4},
		{"compare range", &Txn{Compares: []Compare{{Key: []byte("a"), End: []byte{}, Target: TargetVersion, Result: CompareEqual}}}, CommandFormatV4},
		{"compare lease", &Txn{Compares: []Compare{cmpOf("a", TargetLease, CompareEqual, 7)}}, CommandFormatV4},
		{"prev kvs", &Txn{Success: []Op{{Type: OpDeleteRange, Key: []byte("a"), End: []byte("b"), PrevKV: true}}}, CommandFormatV4},
		{"ignore value", &Txn{Success: []Op{{Type: OpPut, Key: []byte("a"), IgnoreValue: true}}}, CommandFormatV4},
		{"ignore lease", &Txn{Success: []Op{{Type: OpPut, Key: []byte("a"), IgnoreLease: true}}}, CommandFormatV4},
		{"revision", &Txn{Success: []Op{get(RangeOptions{Revision: -1})}}, CommandFormatV4},
		{"sort", &Txn{Success: []Op{get(RangeOptions{SortOrder: SortDescend, SortTarget: SortByValue})}}, CommandFormatV4},
		{"keys only", &Txn{Success: []Op{get(RangeOptions{KeysOnly: true})}}, CommandFormatV4},
		{"count only", &Txn{Success: []Op{get(RangeOptions{CountOnly: true})}}, CommandFormatV4},
		{"with count", &Txn{Success: []Op{get(RangeOptions{WithCount: true})}}, CommandFormatV4},
		{"filters", &Txn{Success: []Op{get(RangeOptions{MinModRevision: 1, MaxModRevision: 2, MinCreateRevision: 3, MaxCreateRevision: -4})}}, CommandFormatV4},
		{"everything nested", &Txn{
			Compares: []Compare{{Key: []byte("a"), End: []byte("z"), Target: TargetValue, Result: CompareLess, Value: []byte("v")}},
			Success: []Op{nested([]Compare{cmpOf("b", TargetLease, CompareNotEqual, 0)},
				[]Op{leased, {Type: OpDelete, Key: []byte("d"), PrevKV: true}, nested(nil, nil, []Op{get(RangeOptions{Revision: 3, WithCount: true})})},
				[]Op{{Type: OpPut, Key: []byte("k"), IgnoreValue: true, IgnoreLease: true}})},
			Failure: []Op{tput("f", "1", "x/v2")},
		}, CommandFormatV4},
	}
	for i, tt := range tests {
		cmd := &Command{Type: CmdTxn, Txn: tt.t}
		b, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("#%d %s: %v", i, tt.name, err)
		}
		back, err := DecodeCommand(b)
		if b[0] != tt.format || err != nil || !reflect.DeepEqual(back, cmd) {
			t.Errorf("#%d %s: format %d (want %d), err %v\n got %+v\nwant %+v", i, tt.name, b[0], tt.format, err, back, cmd)
		}
	}
}

// TestOlderFormatsUnchanged: the seeds in testdata/fuzz/FuzzDecodeCommand were written
// by the releases of formats 1..3 (seed-0..9); this build still encodes those commands
// to the very same bytes and decodes them back.
func TestOlderFormatsUnchanged(t *testing.T) {
	cmds := corpusCommands()
	for i := 0; i < 10; i++ {
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzDecodeCommand", fmt.Sprintf("seed-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		lit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
		want, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("seed-%d: %v", i, err)
		}
		b, err := EncodeCommand(cmds[i])
		if err != nil || string(b) != want || b[0] > CommandFormatV3 {
			t.Errorf("seed-%d: encodes to %q (err %v), want the stored %q", i, b, err, want)
		}
		if back, err := DecodeCommand([]byte(want)); err != nil || !reflect.DeepEqual(back, cmds[i]) {
			t.Errorf("seed-%d: decodes to %+v, %v", i, back, err)
		}
	}
}

// TestOldFormatRefusesLeaseTarget: before format 4, target 6 was unknown and the txn
// invalid on every replica; decoding it must not make it a valid lease compare here.
func TestOldFormatRefusesLeaseTarget(t *testing.T) {
	tx := &Txn{Compares: []Compare{cmpOf("a", TargetLease, CompareEqual, 0)}, Success: []Op{put("a", "1")}}
	for _, f := range []byte{CommandFormatV1, CommandFormatV2, CommandFormatV3} {
		b := appendTxn([]byte{f, byte(CmdTxn)}, tx, f)
		if _, err := DecodeCommand(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("format %d: %v, want ErrCorrupt", f, err)
		}
		if res := NewStore().Apply(1, b); res.Err == nil {
			t.Errorf("format %d: applied %+v", f, res)
		}
	}
}

// TestDecodeNestingBound: decoders take nesting up to MaxTxnDepth, the deepest a valid
// transaction gets, and refuse deeper bytes as corrupt instead of recursing on.
func TestDecodeNestingBound(t *testing.T) {
	for _, tc := range []struct {
		depth int
		ok    bool
	}{{MaxTxnDepth, true}, {MaxTxnDepth + 1, false}} {
		b, err := EncodeCommand(&Command{Type: CmdTxn, Txn: chain(tc.depth, nil)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCommand(b); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrCorrupt)) {
			t.Errorf("command nested %d deep: %v, want ok %v", tc.depth, err, tc.ok)
		}
		res := &Result{Succeeded: true}
		for i := 1; i < tc.depth; i++ {
			res = &Result{Succeeded: true, Responses: []OpResponse{{Type: OpTxn, Txn: res}}}
		}
		rb, err := EncodeResult(res)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeResult(rb); (err == nil) != tc.ok {
			t.Errorf("result nested %d deep: %v, want ok %v", tc.depth, err, tc.ok)
		}
	}
}

// etcdResult is a result with every format-4 field.
func etcdResult() *Result {
	kv := KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 3, Version: 2, Lease: 7, Encoding: "x/v1"}
	return &Result{Revision: 9, Succeeded: true, Responses: []OpResponse{
		{Type: OpDeleteRange, Deleted: 1, PrevKVs: []KeyValue{kv}},
		{Type: OpTxn, Txn: &Result{Succeeded: false, Responses: []OpResponse{
			{Type: OpGet, KVs: []KeyValue{kv}, Count: 12, More: true},
			{Type: OpTxn, Txn: &Result{}},
		}}},
	}}
}

// TestResultFormatV4: results of format-4 commands travel whole, leases included,
// whichever encoder; other results keep their older formats.
func TestResultFormatV4(t *testing.T) {
	for _, enc := range []func(*Result) ([]byte, error){EncodeResult, EncodeResultWithLeases} {
		want := etcdResult()
		b, err := enc(want)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeResult(b)
		if b[0] != resultFormatV4 || err != nil || !reflect.DeepEqual(back, want) {
			t.Errorf("format %d, err %v\n got %+v\nwant %+v", b[0], err, back, want)
		}
	}
	for _, r := range []*Result{{Revision: 1, Responses: []OpResponse{{Type: OpGet, Count: 0}}}, leasedResult()} {
		if b, _ := EncodeResultWithLeases(r); b[0] == resultFormatV4 {
			t.Errorf("%+v encoded in format 4", r)
		}
	}
}
