package membership

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func fullMeta() Meta {
	return Meta{
		NodeID:           "node-1",
		RaftAddr:         "10.0.0.1:7371",
		HTTPAddr:         "10.0.0.1:7370",
		Release:          "v1.4.2",
		MinCommandFormat: 1,
		MaxCommandFormat: 3,
		ClusterLabel:     "prod-eu",
		Incarnation:      0xdeadbeefcafe0001,
		BootstrapExpect:  3,
		HasRaftState:     true,
		Leaving:          true,
		Rejoining:        true,
		StorageVersions: map[string]StorageVersion{
			"apps/deployments": {EncodingVersion: "v1", DecodableVersions: []string{"v1", "v1beta1"}, ServedVersions: []string{"v1"}},
			"core/configmaps":  {EncodingVersion: "v2", DecodableVersions: []string{"v1", "v2"}, ServedVersions: []string{"v1", "v2"}},
			"core/secrets":     {DecodableVersions: []string{"v1"}},
		},
	}
}

func TestMetaRoundTrip(t *testing.T) {
	cases := []Meta{
		{NodeID: "n"},
		{NodeID: "n1", MaxCommandFormat: 1},
		fullMeta(),
		{NodeID: "x", StorageVersions: map[string]StorageVersion{"r": {EncodingVersion: "v9"}}},
		{NodeID: "k", KeyMigrations: map[string]int{"widgets-v2-keys": 3, "a": 0}},
	}
	for i, want := range cases {
		b, err := EncodeMeta(want)
		if err != nil {
			t.Fatalf("#%d: encode: %v", i, err)
		}
		if b[0] != MetaFormatVersion {
			t.Errorf("#%d: first byte = %d, want format version %d", i, b[0], MetaFormatVersion)
		}
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("#%d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("#%d: round trip\n got %+v\nwant %+v", i, got, want)
		}
		again, _ := EncodeMeta(got)
		if !bytes.Equal(again, b) {
			t.Errorf("#%d: encoding not deterministic:\n%x\n%x", i, b, again)
		}
	}
}

// TestMetaEncodingExample pins the worked example of MetaFormatVersion's comment.
func TestMetaEncodingExample(t *testing.T) {
	b, err := EncodeMeta(Meta{NodeID: "n1", MaxCommandFormat: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 1, 2, 'n', '1', 6, 1, 1}
	if !bytes.Equal(b, want) {
		t.Errorf("encoding = %x, want %x", b, want)
	}
}

func TestMetaSizeLimit(t *testing.T) {
	m := Meta{NodeID: "n1", StorageVersions: map[string]StorageVersion{}}
	for i := 0; i < 40; i++ {
		m.StorageVersions[fmt.Sprintf("group.example.com/resource-%02d", i)] = StorageVersion{EncodingVersion: "v1"}
	}
	_, err := EncodeMeta(m)
	if !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("err = %v, want ErrMetaTooLarge", err)
	}
	if !strings.Contains(err.Error(), "limit 512") || !strings.Contains(err.Error(), `"n1"`) {
		t.Errorf("error %q should name the node and the limit", err)
	}
	// Just under the limit encodes, and MetaMaxSize is memberlist's.
	if MetaMaxSize != memberlist.MetaMaxSize {
		t.Errorf("MetaMaxSize = %d, memberlist.MetaMaxSize = %d", MetaMaxSize, memberlist.MetaMaxSize)
	}
	fit := Meta{NodeID: "n1", Release: strings.Repeat("r", MetaMaxSize-1-4-3)}
	b, err := EncodeMeta(fit)
	if err != nil || len(b) != MetaMaxSize {
		t.Errorf("meta of exactly %d bytes: len %d, err %v", MetaMaxSize, len(b), err)
	}
	fit.Release += "r"
	if _, err := EncodeMeta(fit); !errors.Is(err, ErrMetaTooLarge) {
		t.Errorf("meta of %d bytes: err = %v, want ErrMetaTooLarge", MetaMaxSize+1, err)
	}
}

func TestMetaValidate(t *testing.T) {
	cases := []struct {
		mutate func(*Meta)
		want   string // in the error; "" = valid
	}{
		{func(m *Meta) {}, ""},
		{func(m *Meta) { m.NodeID = "" }, "NodeID is empty"},
		{func(m *Meta) { m.NodeID = "a b" }, "spaces"},
		{func(m *Meta) { m.NodeID = strings.Repeat("a", MaxNodeIDLen+1) }, "limit 128"},
		{func(m *Meta) { m.MinCommandFormat = 4 }, "MinCommandFormat 4 > MaxCommandFormat 3"},
		{func(m *Meta) { m.MaxCommandFormat = 256 }, "MaxCommandFormat 256"},
		{func(m *Meta) { m.MinCommandFormat = -1 }, "MinCommandFormat -1"},
		{func(m *Meta) { m.BootstrapExpect = -1 }, "BootstrapExpect -1"},
		{func(m *Meta) { m.Release = "\xff" }, "Release"},
		{func(m *Meta) { m.StorageVersions[""] = StorageVersion{} }, "resource name"},
		{func(m *Meta) { m.StorageVersions["r"] = StorageVersion{ServedVersions: []string{""}} }, `StorageVersions["r"]`},
	}
	for i, c := range cases {
		m := fullMeta()
		c.mutate(&m)
		err := m.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("#%d: err = %v, want nil", i, err)
		case c.want != "" && (!errors.Is(err, ErrInvalidMeta) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("#%d: err = %v, want ErrInvalidMeta naming %q", i, err, c.want)
		}
		if _, encErr := EncodeMeta(m); (encErr == nil) != (c.want == "") {
			t.Errorf("#%d: EncodeMeta err = %v, want it to match Validate", i, encErr)
		}
	}
}

// TestDecodeMetaNewerFormat: a newer release (format 2..127) that adds fields with
// new tags stays readable; the fields this release knows come through.
func TestDecodeMetaNewerFormat(t *testing.T) {
	b, err := EncodeMeta(Meta{NodeID: "n1", RaftAddr: "a:1", MaxCommandFormat: 2})
	if err != nil {
		t.Fatal(err)
	}
	newer := append([]byte{7}, b[1:]...)
	newer = appendField(newer, 200, []byte("a future field"))
	newer = appendField(newer, 201, nil)
	got, err := DecodeMeta(newer)
	if err != nil {
		t.Fatalf("decode format 7: %v", err)
	}
	if got.NodeID != "n1" || got.RaftAddr != "a:1" || got.MaxCommandFormat != 2 {
		t.Errorf("decoded %+v, want the known fields", got)
	}
}

func TestDecodeMetaErrors(t *testing.T) {
	valid, _ := EncodeMeta(fullMeta())
	cases := []struct {
		in   []byte
		want error
		msg  string
	}{
		{nil, ErrMetaCorrupt, "empty"},
		{[]byte{0, 1, 1, 'a'}, ErrMetaCorrupt, "format version 0"},
		{[]byte{128, 1, 1, 'a'}, ErrUnknownMetaFormat, "format version 128"},
		{[]byte{255}, ErrUnknownMetaFormat, "upgrade"},
		{[]byte{1, 1, 5, 'a'}, ErrMetaCorrupt, "truncated"},
		{[]byte{1, 1, 0xff}, ErrMetaCorrupt, "truncated"},
		{[]byte{1, 2, 1, 'a', 1, 1, 'b'}, ErrMetaCorrupt, "tag 1 after tag 2"},
		{[]byte{1, 1, 1, 'a', 1, 1, 'b'}, ErrMetaCorrupt, "tag 1 after tag 1"},
		{[]byte{1, 5, 2, 0x80, 0x80}, ErrMetaCorrupt, "bad uvarint"},
		{[]byte{1, 5, 5, 0xff, 0xff, 0xff, 0xff, 0x0f}, ErrMetaCorrupt, "out of range"},
		{[]byte{1, 8, 2, 1, 2}, ErrMetaCorrupt, "want 8"},
		{[]byte{1, 10, 1, 2}, ErrMetaCorrupt, "bad bool"},
		{[]byte{1, 12, 2, 0xff, 0xff}, ErrMetaCorrupt, "storage versions"},
		{[]byte{1, 12, 4, 0, 1, 1, 'r'}, ErrMetaCorrupt, "storage versions"},       // resource record cut short
		{[]byte{1, 12, 7, 0, 1, 1, 'r', 1, 0, 0}, ErrMetaCorrupt, "outside table"}, // encoding index 0 of empty table
		{[]byte{1, 12, 2, 0, 9}, ErrMetaCorrupt, "count 9"},
		{valid[:len(valid)-1], ErrMetaCorrupt, "truncated"},
	}
	for i, c := range cases {
		_, err := DecodeMeta(c.in)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("#%d: DecodeMeta(%x) err = %v, want %v containing %q", i, c.in, err, c.want, c.msg)
		}
	}
}

// FuzzDecodeMeta: DecodeMeta never panics, and whatever it accepts and validates
// re-encodes to bytes that decode to the same metadata.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{{NodeID: "n"}, fullMeta(), {NodeID: "k", KeyMigrations: map[string]int{"w": 5}}} {
		b, _ := EncodeMeta(m)
		f.Add(b)
	}
	f.Add([]byte{2, 1, 1, 'n', 99, 0})
	f.Add([]byte{128})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrMetaCorrupt) && !errors.Is(err, ErrUnknownMetaFormat) {
				t.Fatalf("error %v is neither ErrMetaCorrupt nor ErrUnknownMetaFormat", err)
			}
			return
		}
		enc, err := EncodeMeta(m)
		if err != nil {
			return // decodable but invalid (e.g. Min > Max) or too large: Validate's job
		}
		again, err := DecodeMeta(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(normalizeMeta(again), normalizeMeta(m)) {
			t.Fatalf("re-encode changed metadata:\n%+v\n%+v", m, again)
		}
	})
}

// normalizeMeta makes empty lists and maps nil: the encoding does not tell them apart.
func normalizeMeta(m Meta) Meta {
	if len(m.KeyMigrations) == 0 {
		m.KeyMigrations = nil
	}
	if len(m.StorageVersions) == 0 {
		m.StorageVersions = nil
	}
	for k, sv := range m.StorageVersions {
		if len(sv.DecodableVersions) == 0 {
			sv.DecodableVersions = nil
		}
		if len(sv.ServedVersions) == 0 {
			sv.ServedVersions = nil
		}
		m.StorageVersions[k] = sv
	}
	return m
}

func BenchmarkEncodeMeta(b *testing.B) {
	m := fullMeta()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeMeta(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMeta(b *testing.B) {
	raw, _ := EncodeMeta(fullMeta())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMeta(raw); err != nil {
			b.Fatal(err)
		}
	}
}
