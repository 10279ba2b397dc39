package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// corpusCommands are valid commands whose encodings seed the fuzzers.
func corpusCommands() []*Command {
	return []*Command{
		txn(put("k", "v")),
		txn(del("k"), Op{Type: OpDeleteRange, Key: []byte("a/"), End: []byte("a0")}),
		{Type: CmdTxn, Txn: &Txn{
			Compares: []Compare{{Key: []byte("k"), Target: TargetModRevision, Result: CompareEqual, Int: 3}},
			Success:  []Op{put("k", "new")},
			Failure:  []Op{{Type: OpGet, Key: []byte("k")}, {Type: OpGet, Key: []byte("a"), End: []byte{}, Limit: 5}},
		}},
		{Type: CmdCompact, Revision: 42},
		{Type: CmdClusterMeta, ClusterID: "c", Secret: []byte("0123456789abcdef")},
		{Type: CmdLeaseGrant, LeaseID: 7, LeaseTTL: 10000},
		txn(Op{Type: OpPut, Key: []byte("l/1"), Value: []byte("x"), Lease: 7}, put("l/2", "y")),
		{Type: CmdLeaseCheckpoint, Checkpoints: []LeaseCheckpoint{{ID: 7, Remaining: 4000}, {ID: 8, Remaining: 1}}},
		{Type: CmdLeaseGrant, LeaseID: 8, LeaseTTL: 2000},
		{Type: CmdLeaseRevoke, LeaseIDs: []int64{8, 9}},
	}
}

// etcdCorpusCommands are format-4 commands (etcd's KV API) for the fuzzers' seeds.
func etcdCorpusCommands() []*Command {
	get := Op{Type: OpGet, Key: []byte("a"), End: []byte{}, Limit: 2,
		Range: RangeOptions{Revision: 1, SortOrder: SortDescend, SortTarget: SortByMod, KeysOnly: true, WithCount: true, MinModRevision: 1}}
	return []*Command{
		{Type: CmdTxn, Txn: &Txn{
			Compares: []Compare{{Key: []byte("a"), End: []byte("b"), Target: TargetLease, Result: CompareEqual, Int: 7}},
			Success: []Op{put("k", "v"), {Type: OpTxn, Txn: &Txn{
				Compares: []Compare{{Key: []byte("k"), Target: TargetExists, Result: CompareEqual}},
				Success:  []Op{{Type: OpDeleteRange, Key: []byte("a/"), End: []byte("a0"), PrevKV: true}, get},
				Failure:  []Op{{Type: OpPut, Key: []byte("k"), IgnoreValue: true, IgnoreLease: true}},
			}}},
			Failure: []Op{{Type: OpGet, Key: []byte("k"), Range: RangeOptions{CountOnly: true}}},
		}},
		txn(Op{Type: OpDelete, Key: []byte("k"), PrevKV: true}, Op{Type: OpTxn, Txn: &Txn{}}),
	}
}

// ownerCorpusCommands are format-5 commands (a lease grant with its owner) and what
// uses the lease, for the fuzzers' seeds.
func ownerCorpusCommands() []*Command {
	return []*Command{
		{Type: CmdLeaseGrant, LeaseID: 11, LeaseTTL: 30000, LeaseOwner: "p:app-writer\nteam-a"},
		txn(Op{Type: OpPut, Key: []byte("lock/a"), Value: []byte("me"), Lease: 11}),
	}
}

// ownerSnapshot is a format-4 snapshot: the corpus store with an owned lease too.
func ownerSnapshot() []byte {
	s := NewStore()
	for i, c := range append(corpusCommands(), ownerCorpusCommands()...) {
		s.ApplyCommand(uint64(i+1), c)
	}
	var buf bytes.Buffer
	s.Snapshot().WriteTo(&buf)
	return buf.Bytes()
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range append(append(corpusCommands(), etcdCorpusCommands()...), ownerCorpusCommands()...) {
		b, _ := EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := DecodeCommand(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownFormat) {
				t.Fatalf("error %v is neither corrupt nor unknown format", err)
			}
			return
		}
		b, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		again, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(again, cmd) {
			t.Fatalf("re-decode: %v\n%+v\n%+v", err, again, cmd)
		}
		// Whatever decodes, the store applies without panicking; a rejected command
		// changes nothing.
		s := NewStore()
		s.ApplyCommand(1, txn(put("k", "v"), put("a/1", "x")))
		h := s.View().Hash()
		if res := s.Apply(2, data); res.Err != nil && s.View().Hash() != h {
			t.Fatalf("rejected command changed state: %v", res.Err)
		}
	})
}

func FuzzDecodeResult(f *testing.F) {
	s := NewStore()
	for i, c := range corpusCommands() {
		b, _ := EncodeResult(s.ApplyCommand(uint64(i+1), c))
		f.Add(b)
	}
	b, _ := EncodeResultWithLeases(leasedResult())
	f.Add(b)
	b, _ = EncodeResult(etcdResult())
	f.Add(b)
	for _, c := range etcdCorpusCommands() {
		b, _ := EncodeResult(s.ApplyCommand(s.AppliedIndex()+1, c))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeResult(data)
		if err != nil {
			return
		}
		if _, err := EncodeResult(r); err != nil {
			t.Fatal(err)
		}
		b, err := EncodeResultWithLeases(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeResult(b)
		if err != nil {
			t.Fatalf("re-encoded result: %v", err)
		}
		if !reflect.DeepEqual(back.Responses, r.Responses) {
			t.Fatalf("responses %+v, re-decoded %+v", r.Responses, back.Responses)
		}
	})
}

// leasedResult is a txn result whose get found a tagged key and a leased one.
func leasedResult() *Result {
	return &Result{Revision: 9, Succeeded: true, Responses: []OpResponse{{Type: OpGet, KVs: []KeyValue{
		{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 3, Version: 2, Encoding: "x/v1"},
		{Key: []byte("b"), Value: []byte("2"), CreateRevision: 4, ModRevision: 4, Version: 1, Lease: 7}}}}}
}

func corpusSnapshot() []byte {
	s := NewStore()
	for i, c := range corpusCommands() {
		s.ApplyCommand(uint64(i+1), c)
	}
	s.ApplyCommand(9, txn(put("k", "2"), put("z", "")))
	var buf bytes.Buffer
	s.Snapshot().WriteTo(&buf)
	return buf.Bytes()
}

func FuzzRestore(f *testing.F) {
	f.Add(corpusSnapshot())
	f.Add(ownerSnapshot())
	f.Add([]byte(snapshotMagic + "\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewStore()
		s.ApplyCommand(1, txn(put("before", "restore")))
		h := s.View().Hash()
		if err := s.Restore(bytes.NewReader(data)); err != nil {
			if s.View().Hash() != h {
				t.Fatal("failed restore changed state")
			}
			return
		}
		// A restored store serves reads, snapshots again identically and compacts.
		v := s.View()
		v.Range(nil, nil, 0, 0)
		var buf bytes.Buffer
		if _, err := s.Snapshot().WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		again := NewStore()
		if err := again.Restore(&buf); err != nil || again.View().Hash() != v.Hash() {
			t.Fatalf("a restored store does not round-trip: %v", err)
		}
		if v.Revision() > v.CompactRevision() {
			s.ApplyCommand(s.AppliedIndex()+1, &Command{Type: CmdCompact, Revision: v.Revision()})
			for _, more := s.CompactStep(64); more; _, more = s.CompactStep(64) {
			}
		}
	})
}

// TestWriteFuzzCorpus refreshes testdata/fuzz from the seeds above when
// KEEL_WRITE_CORPUS is set, so the corpus stays in the repository.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("KEEL_WRITE_CORPUS") == "" {
		t.Skip("set KEEL_WRITE_CORPUS=1 to rewrite testdata/fuzz")
	}
	write := func(target string, i int, data []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := NewStore()
	for i, c := range corpusCommands() {
		b, _ := EncodeCommand(c)
		write("FuzzDecodeCommand", i, b)
		rb, _ := EncodeResult(s.ApplyCommand(uint64(i+1), c))
		write("FuzzDecodeResult", i, rb)
	}
	lb, _ := EncodeResultWithLeases(leasedResult())
	write("FuzzDecodeResult", len(corpusCommands()), lb)
	// Format 4 seeds get their own names, so the older ones above stay as written.
	writeNamed := func(target, name string, data []byte) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join("testdata", "fuzz", target, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range etcdCorpusCommands() {
		b, _ := EncodeCommand(c)
		writeNamed("FuzzDecodeCommand", fmt.Sprintf("etcd-%d", i), b)
		rb, _ := EncodeResult(s.ApplyCommand(s.AppliedIndex()+1, c))
		writeNamed("FuzzDecodeResult", fmt.Sprintf("etcd-%d", i), rb)
	}
	eb, _ := EncodeResult(etcdResult())
	writeNamed("FuzzDecodeResult", "etcd-result", eb)
	for i, c := range ownerCorpusCommands() {
		b, _ := EncodeCommand(c)
		writeNamed("FuzzDecodeCommand", fmt.Sprintf("owner-%d", i), b)
	}
	write("FuzzRestore", 0, corpusSnapshot())
	writeNamed("FuzzRestore", "owner", ownerSnapshot())
}
