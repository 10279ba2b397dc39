package kv

import "testing"

// TestMaxRequestBytes: the largest request a door must accept whole is the larger of a
// put of the largest value under the longest key and the largest txn body.
func TestMaxRequestBytes(t *testing.T) {
	for i, tt := range []struct {
		key        int
		value, txn int64
		want       int64
	}{
		{4096, 1536 << 10, 8 << 20, 8 << 20},   // the defaults: a txn body
		{4096, 8 << 20, 8 << 20, 8<<20 + 4096}, // a put of the largest value and key
		{10, 100, 105, 110},
	} {
		c := Config{MaxKeyBytes: tt.key, MaxValueBytes: tt.value, MaxTxnBodyBytes: tt.txn}
		if got := c.MaxRequestBytes(); got != tt.want {
			t.Errorf("#%d: MaxRequestBytes = %d, want %d", i, got, tt.want)
		}
	}
}
