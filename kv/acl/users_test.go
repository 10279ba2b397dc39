package acl

import (
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestAuthorizerEtcdRanges: etcd's permission ranges as key rules — one key, [key,
// end), from key on — and write-only (etcd's WRITE), against keys, spans, Some,
// NextReadable and the no-escalation check:
//
//	rules: read "k" alone, read [a, c), write-only "w" alone, read "x" on
func TestAuthorizerEtcdRanges(t *testing.T) {
	p := api.ACLPolicy{Keys: []api.ACLKeyRule{
		{Key: "k", Access: api.AccessRead},
		{Key: "a", End: "c", Access: api.AccessRead},
		{Key: "w", Access: api.AccessWriteOnly},
		{Key: "x", End: api.ACLFromKey, Access: api.AccessRead},
	}}
	if err := ValidatePolicy(api.ACLPolicy{Name: "p", Keys: p.Keys}); err != nil {
		t.Fatalf("valid rules refused: %v", err)
	}
	az := NewAuthorizer(p)
	checks := []struct {
		name      string
		got, want bool
	}{
		{"read k", az.Key([]byte("k"), false), true},
		{"read k2 (exact rule)", az.Key([]byte("k2"), false), false},
		{"write k (read rule)", az.Key([]byte("k"), true), false},
		{"read a", az.Key([]byte("a"), false), true},
		{"read bzz", az.Key([]byte("bzz"), false), true},
		{"read c (end excluded)", az.Key([]byte("c"), false), false},
		{"write w", az.Key([]byte("w"), true), true},
		{"read w (write-only)", az.Key([]byte("w"), false), false},
		{"read zzz (from x on)", az.Key([]byte("zzz"), false), true},
		{"read [a, c)", az.Span([]byte("a"), []byte("c"), false), true},
		{"read [a, d)", az.Span([]byte("a"), []byte("d"), false), false},
		{"read [x, end)", az.Span([]byte("x"), nil, false), true},
		{"read [k, k\\x00)", az.Span([]byte("k"), []byte("k\x00"), false), true},
		{"some of [d, j) (none)", az.Some([]byte("d"), []byte("j")), false},
		{"some of [w, w\\x00) (write-only)", az.Some([]byte("w"), []byte("w\x00")), false},
		{"some of [j, l)", az.Some([]byte("j"), []byte("l")), true},
		{"any write", az.AnyWrite(), true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if got := string(az.NextReadable([]byte("c"), nil)); got != "k" {
		t.Errorf("NextReadable(c) = %q, want k", got)
	}
	if got := string(az.NextReadable([]byte("l"), nil)); got != "x" {
		t.Errorf("NextReadable(l) = %q, want x (w is write-only)", got)
	}
	// No escalation: write-only does not hold read or write; a range holds what it covers.
	holder := NewAuthorizer(api.ACLPolicy{Keys: []api.ACLKeyRule{{Key: "a", End: "m", Access: api.AccessWriteOnly}}})
	for _, c := range []struct {
		rule api.ACLKeyRule
		want bool
	}{
		{api.ACLKeyRule{Key: "b", Access: api.AccessWriteOnly}, true},
		{api.ACLKeyRule{Key: "b", End: "m", Access: api.AccessWriteOnly}, true},
		{api.ACLKeyRule{Key: "b", End: "n", Access: api.AccessWriteOnly}, false},
		{api.ACLKeyRule{Key: "b", Access: api.AccessWrite}, false},
		{api.ACLKeyRule{Key: "b", Access: api.AccessRead}, false},
		{api.ACLKeyRule{Prefix: "b", Access: api.AccessWriteOnly}, true},
		{api.ACLKeyRule{Key: "b", End: api.ACLFromKey, Access: api.AccessWriteOnly}, false},
	} {
		if got := holder.Beyond(api.ACLPolicy{Keys: []api.ACLKeyRule{c.rule}}) == ""; got != c.want {
			t.Errorf("write-only [a, m) holds %+v: %v, want %v", c.rule, got, c.want)
		}
	}
}

// TestValidateEtcdRanges: a rule is a prefix or a key range, and a range's end sorts
// after its key (or is from-key).
func TestValidateEtcdRanges(t *testing.T) {
	for _, k := range []api.ACLKeyRule{
		{End: "b", Access: api.AccessRead},
		{Prefix: "p", Key: "a", Access: api.AccessRead},
		{Key: "b", End: "a", Access: api.AccessRead},
		{Key: "b", End: "b", Access: api.AccessRead},
		{Key: "b", Access: "readwrite"},
	} {
		if err := ValidatePolicy(api.ACLPolicy{Name: "p", Keys: []api.ACLKeyRule{k}}); err == nil {
			t.Errorf("rule %+v accepted", k)
		}
	}
}
