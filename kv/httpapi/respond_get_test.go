package httpapi

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// TestGetJSONAsEncodingJSON: the hand-written GET answer is byte for byte what
// encoding/json writes for api.GetResponse, for keys that need escaping (quotes,
// control bytes, HTML characters, U+2028, non-ASCII), nil and empty values and leases.
func TestGetJSONAsEncodingJSON(t *testing.T) {
	keys := []string{"app/key", "", `q"uote`, `back\slash`, "tab\tnl\n", "<a&b>", "line\u2028sep", "ünï/日本", "\x7f", "~!@#$%^*()_+"}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		k := []byte(keys[i%len(keys)])
		if i >= len(keys) {
			k = make([]byte, rng.IntN(12))
			for j := range k {
				k[j] = byte(rng.IntN(128))
			}
		}
		var val []byte
		switch i % 3 {
		case 1:
			val = []byte{}
		case 2:
			val = make([]byte, rng.IntN(300))
			for j := range val {
				val[j] = byte(rng.IntN(256))
			}
		}
		item := fsm.KeyValue{Key: k, Value: val, CreateRevision: rng.Int64N(1 << 40), ModRevision: rng.Int64N(1 << 40),
			Version: rng.Int64N(100), Lease: int64(i%2) * rng.Int64N(1<<50)}
		rev := rng.Int64N(1 << 40)
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(api.GetResponse{KV: kv.APIKV(item), Revision: rev}); err != nil {
			t.Fatal(err)
		}
		if got := appendGetJSON(nil, item, rev); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("key %q:\n got %s\nwant %s", k, got, want.Bytes())
		}
	}
}
