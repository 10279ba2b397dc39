package ctoken

import (
	"errors"
	"testing"
)

// FuzzDecodeToken: decoding any string never panics; anything it accepts is a
// well-formed token that re-encodes (in its version) to the same string (so no two
// strings are the same token, and no unauthenticated byte slips through).
func FuzzDecodeToken(f *testing.F) {
	c := NewCodec([]byte("fuzz secret"))
	for _, tok := range []Token{
		{Revision: 42, Next: []byte("app/n"), Start: []byte("app/"), End: []byte("app0")},
		{Revision: 0, Next: []byte{0}},
	} {
		f.Add(c.Encode(tok))
		f.Add(c.encodeV1(tok))
	}
	f.Add("")
	f.Add("AQ")
	f.Add("Ag")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := c.Decode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("decode error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if len(tok.Next) == 0 || tok.Revision < 0 {
			t.Fatalf("accepted malformed token %+v", tok)
		}
		raw, _ := tokenEncoding.DecodeString(s)
		again := c.Encode(tok)
		if raw[0] == Version1 {
			again = c.encodeV1(tok)
		}
		if again != s {
			t.Fatalf("accepted %q, which re-encodes as %q", s, again)
		}
	})
}
