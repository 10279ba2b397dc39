package acl

import (
	"fmt"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// The cost of one decision, for a token with n key rules checked against n typed
// resources' ranges (a request pays one Key or Span; a filtered scan NextReadable).
func BenchmarkAuthorizerKey4(b *testing.B)   { benchmarkAuthorizer(b, 4, "key") }
func BenchmarkAuthorizerKey32(b *testing.B)  { benchmarkAuthorizer(b, 32, "key") }
func BenchmarkAuthorizerSpan4(b *testing.B)  { benchmarkAuthorizer(b, 4, "span") }
func BenchmarkAuthorizerSpan32(b *testing.B) { benchmarkAuthorizer(b, 32, "span") }
func BenchmarkNextReadable4(b *testing.B)    { benchmarkAuthorizer(b, 4, "next") }
func BenchmarkNextReadable32(b *testing.B)   { benchmarkAuthorizer(b, 32, "next") }

func benchmarkAuthorizer(b *testing.B, n int, op string) {
	var p api.ACLPolicy
	var ranges []GuardRange
	for i := range n {
		p.Keys = append(p.Keys, api.ACLKeyRule{Prefix: fmt.Sprintf("app%02d/", i), Access: api.AccessWrite})
		ranges = append(ranges, GuardRange{Prefix: fmt.Appendf(nil, "res%02d/", i), Group: "g", Resource: fmt.Sprint(i)})
	}
	az := NewAuthorizer(p).WithGuard(func() []GuardRange { return ranges })
	key := fmt.Appendf(nil, "app%02d/key", n-1)
	end := fmt.Appendf(nil, "app%02d0", n-1)
	from := []byte("app/") // before every rule: NextReadable walks to the first
	b.ReportAllocs()
	for b.Loop() {
		var ok bool
		switch op {
		case "key":
			ok = az.Key(key, true)
		case "span":
			ok = az.Span(key, end, false)
		case "next":
			ok = az.NextReadable(from, nil) != nil
		}
		if !ok {
			b.Fatalf("%s refused", op)
		}
	}
}
