package ctoken

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// encodeV1 is the encoder of the releases that issue only version 1 tokens (signed,
// not encrypted): a new node must still read what they issued.
func (c *Codec) encodeV1(t Token) string { return c.EncodeAs(Version1, t) }

// TestTokenOpaque: a token issued now does not contain its keys in any form a client
// can read (kills: encode writing version 1, or sealing without encryption).
func TestTokenOpaque(t *testing.T) {
	c := NewCodec([]byte("secret"))
	tok := Token{Revision: 42, Next: []byte("app/session-7f3a"), Start: []byte("app/"), End: []byte("app0")}
	s := c.Encode(tok)
	raw, err := tokenEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != Version2 {
		t.Fatalf("issued version %d, want %d", raw[0], Version2)
	}
	for _, k := range [][]byte{tok.Next, tok.Start, []byte("session")} {
		if bytes.Contains(raw, k) || strings.Contains(s, base64.RawURLEncoding.EncodeToString(k)[:4]) {
			t.Errorf("token %q shows %q", s, k)
		}
	}
	// Deterministic (a synthetic salt), but two positions share no salt.
	if s2 := c.Encode(tok); s2 != s {
		t.Errorf("the same position encodes as %q and %q", s, s2)
	}
	tok.Next = []byte("app/session-7f3b")
	raw2, _ := tokenEncoding.DecodeString(c.Encode(tok))
	if bytes.Equal(raw[1:1+tokenSaltSize], raw2[1:1+tokenSaltSize]) {
		t.Errorf("two positions share the salt %x", raw[1:1+tokenSaltSize])
	}
}

// TestTokenVersion1StillRead: a token of an older node (version 1) is served by a new
// one, so a scan survives a rolling upgrade; a version 1 token of another cluster, or
// tampered, is still refused.
func TestTokenVersion1StillRead(t *testing.T) {
	c := NewCodec([]byte("secret"))
	want := Token{Revision: 9, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")}
	got, err := c.Decode(c.encodeV1(want))
	if err != nil || got.Revision != want.Revision || !bytes.Equal(got.Next, want.Next) {
		t.Fatalf("decode(v1) = %+v, %v; want %+v", got, err, want)
	}
	other := NewCodec([]byte("other")).encodeV1(want)
	if _, err := c.Decode(other); !errors.Is(err, ErrInvalid) {
		t.Errorf("foreign v1 token: %v, want ErrInvalid", err)
	}
}

// TestTokenV2Tampered: flipping any byte of a version 2 token, or giving it to another
// cluster, is ErrInvalid.
func TestTokenV2Tampered(t *testing.T) {
	c := NewCodec([]byte("secret"))
	s := c.Encode(Token{Revision: 3, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")})
	raw, _ := tokenEncoding.DecodeString(s)
	for i := range raw {
		b := bytes.Clone(raw)
		b[i] ^= 0x20
		if _, err := c.Decode(tokenEncoding.EncodeToString(b)); !errors.Is(err, ErrInvalid) {
			t.Errorf("byte %d flipped: %v, want ErrInvalid", i, err)
		}
	}
	if _, err := NewCodec([]byte("other")).Decode(s); !errors.Is(err, ErrInvalid) {
		t.Errorf("foreign token: %v, want ErrInvalid", err)
	}
	if _, err := c.Decode(tokenEncoding.EncodeToString(raw[:1+tokenSaltSize+tokenTagSize-1])); !errors.Is(err, ErrInvalid) {
		t.Errorf("short token: %v", err)
	}
}

// TestTokenNonCanonicalSalt: a version 2 token sealed under any salt but the synthetic
// one of its fields is refused, even though its GCM tag is valid (it can be made only
// with the cluster's keys): every accepted string is the one encoding of its token
// (kills: Decode skipping the salt check).
func TestTokenNonCanonicalSalt(t *testing.T) {
	c := NewCodec([]byte("secret"))
	tok := Token{Revision: 3, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")}
	fields := appendFields(nil, tok)
	salt := bytes.Repeat([]byte{0x5a}, tokenSaltSize)
	b := append([]byte{Version2}, salt...)
	s := tokenEncoding.EncodeToString(c.aead(salt).Seal(b, zeroNonce[:], fields, b[:1]))
	if _, err := c.Decode(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("token under a chosen salt: %v, want ErrInvalid", err)
	}
	if _, err := c.Decode(c.Encode(tok)); err != nil {
		t.Fatalf("the canonical token: %v", err)
	}
}
