package ctoken

import "testing"

func BenchmarkTokenEncode(b *testing.B) {
	c := NewCodec([]byte("bench secret"))
	tok := Token{Revision: 123456, Next: []byte("registry/pods/default/pod-000123"),
		Start: []byte("registry/pods/"), End: []byte("registry/pods0")}
	b.ReportAllocs()
	for b.Loop() {
		c.Encode(tok)
	}
}

func BenchmarkTokenDecode(b *testing.B) {
	c := NewCodec([]byte("bench secret"))
	s := c.Encode(Token{Revision: 123456, Next: []byte("registry/pods/default/pod-000123"),
		Start: []byte("registry/pods/"), End: []byte("registry/pods0")})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Decode(s); err != nil {
			b.Fatal(err)
		}
	}
}
