package fsm

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

func tput(k, v, enc string) Op {
	return Op{Type: OpPut, Key: []byte(k), Value: []byte(v), Encoding: enc}
}

// TestEncodingCounts follows the live-key count per encoding tag through every kind of
// write:
//
//	step                          a      b      c      counts
//	put a@v1, b@v1                v1     v1     -      v1:2
//	put a@v2                      v2     v1     -      v1:1 v2:1
//	put b untagged                v2     ""     -      v2:1
//	put c@v1; delete c (one txn)  v2     ""     -      v2:1   (c never existed)
//	delete-range [a, z)           -      -      -      {}
//	put a@v1 then a@v2 (one txn)  v2     -      -      v2:1
func TestEncodingCounts(t *testing.T) {
	s := NewStore()
	steps := []struct {
		cmd  *Command
		want map[string]int64
	}{
		{txn(tput("a", "1", "v1"), tput("b", "1", "v1")), map[string]int64{"v1": 2}},
		{txn(tput("a", "2", "v2")), map[string]int64{"v1": 1, "v2": 1}},
		{txn(tput("b", "2", "")), map[string]int64{"v2": 1}},
		{txn(tput("c", "1", "v1"), del("c")), map[string]int64{"v2": 1}},
		{txn(Op{Type: OpDeleteRange, Key: []byte("a"), End: []byte("z")}), map[string]int64{}},
		{txn(tput("a", "3", "v1"), tput("a", "4", "v2")), map[string]int64{"v2": 1}},
	}
	var old *View
	for i, st := range steps {
		if res := apply(t, s, st.cmd); res.Err != nil {
			t.Fatalf("#%d: %v", i, res.Err)
		}
		if got := s.View().Encodings(); !maps.Equal(got, st.want) {
			t.Errorf("#%d: encodings = %v, want %v", i, got, st.want)
		}
		if i == 0 {
			old = s.View()
		}
	}
	// An old view keeps the counts of its revision.
	if got := old.Encodings(); !maps.Equal(got, map[string]int64{"v1": 2}) {
		t.Errorf("old view encodings = %v, want v1:2", got)
	}
	if kv := mustGet(t, s.View(), "a", 0); kv.Encoding != "v2" {
		t.Errorf("a encoding = %q, want v2", kv.Encoding)
	}
	if kv := mustGet(t, old, "a", 0); kv.Encoding != "v1" {
		t.Errorf("a encoding at rev 1 = %q, want v1", kv.Encoding)
	}
}

// TestEncodingFormats checks that a tagged command needs format 2, an untagged one keeps
// format 1 (so nodes of older releases can apply it), and tags survive the codecs.
func TestEncodingFormats(t *testing.T) {
	plain, err := EncodeCommand(txn(put("k", "v")))
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := EncodeCommand(txn(tput("k", "v", "apps/widgets/v2")))
	if err != nil {
		t.Fatal(err)
	}
	if plain[0] != CommandFormatV1 || tagged[0] != CommandFormatV2 {
		t.Fatalf("formats = %d, %d; want %d, %d", plain[0], tagged[0], CommandFormatV1, CommandFormatV2)
	}
	cmd, err := DecodeCommand(tagged)
	if err != nil {
		t.Fatal(err)
	}
	if got := cmd.Txn.Success[0].Encoding; got != "apps/widgets/v2" {
		t.Errorf("decoded encoding = %q", got)
	}
	res := &Result{Revision: 3, Succeeded: true, Responses: []OpResponse{{Type: OpGet,
		KVs: []KeyValue{{Key: []byte("k"), Value: []byte("v"), CreateRevision: 1, ModRevision: 3, Version: 2, Encoding: "x/v1"}}}}}
	b, err := EncodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Responses[0].KVs[0].Encoding; got != "x/v1" {
		t.Errorf("result encoding = %q", got)
	}
	// Leases travel only with EncodeResultWithLeases, in format 3; EncodeResult keeps
	// the format an older node decodes and drops them.
	leased := leasedResult()
	for _, c := range []struct {
		enc    func(*Result) ([]byte, error)
		format byte
		lease  int64
	}{{EncodeResult, resultFormatV2, 0}, {EncodeResultWithLeases, resultFormatV3, 7}} {
		b, err := c.enc(leased)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeResult(b)
		if err != nil {
			t.Fatal(err)
		}
		kvs := back.Responses[0].KVs
		if b[0] != c.format || kvs[1].Lease != c.lease || kvs[0].Encoding != "x/v1" {
			t.Errorf("format %d, leases %d %d, encoding %q; want format %d, lease %d", b[0], kvs[0].Lease, kvs[1].Lease,
				kvs[0].Encoding, c.format, c.lease)
		}
	}
	if b, _ := EncodeResultWithLeases(res); b[0] != resultFormatV2 {
		t.Errorf("a result without leases: format %d with leases asked, want %d", b[0], resultFormatV2)
	}
	for i, bad := range []*Command{
		txn(Op{Type: OpDelete, Key: []byte("k"), Encoding: "v1"}),
		txn(Op{Type: OpPut, Key: []byte("k"), Encoding: string(bytes.Repeat([]byte("x"), MaxEncodingLen+1))}),
		txn(Op{Type: OpPut, Key: []byte("k"), Encoding: "\xff"}),
	} {
		s := NewStore()
		if res := apply(t, s, bad); !errors.Is(res.Err, ErrInvalidCommand) || s.Revision() != 0 {
			t.Errorf("#%d: err = %v, revision %d; want ErrInvalidCommand and nothing written", i, res.Err, s.Revision())
		}
	}
}

// TestEncodingSnapshot checks that tags and counts survive a snapshot round trip.
func TestEncodingSnapshot(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(tput("a", "1", "v1"), tput("b", "1", "v2"), put("c", "1")))
	apply(t, s, txn(tput("a", "2", "v2")))
	r := restoredCopy(t, s)
	if got, want := r.View().Encodings(), map[string]int64{"v2": 2}; !maps.Equal(got, want) {
		t.Errorf("restored encodings = %v, want %v", got, want)
	}
	if r.View().Hash() != s.View().Hash() {
		t.Error("restored hash differs")
	}
	if kv, _ := r.View().Get([]byte("a"), 1); kv.Encoding != "v1" {
		t.Errorf("a@1 encoding = %q, want v1", kv.Encoding)
	}
	// A later write counts against the restored map, not a shared one.
	apply(t, r, txn(tput("c", "2", "v1")))
	if got, want := r.View().Encodings(), map[string]int64{"v1": 1, "v2": 2}; !maps.Equal(got, want) {
		t.Errorf("after write encodings = %v, want %v", got, want)
	}
}
