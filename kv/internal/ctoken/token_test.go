package ctoken

import (
	"bytes"
	"errors"
	"testing"
)

func TestTokenRoundTrip(t *testing.T) {
	c := NewCodec([]byte("secret"))
	tests := []Token{
		{Revision: 42, Next: []byte("app/n"), Start: []byte("app/"), End: []byte("app0")},
		{Revision: 0, Next: []byte{0}},
		{Revision: 1<<63 - 1, Next: bytes.Repeat([]byte("k"), 4096), Start: []byte("k"), End: []byte("l")},
		{Revision: 7, Next: []byte("b"), End: []byte{}},
	}
	for i, want := range tests {
		got, err := c.Decode(c.Encode(want))
		if err != nil {
			t.Fatalf("#%d: decode: %v", i, err)
		}
		if got.Revision != want.Revision || !bytes.Equal(got.Next, want.Next) || !bytes.Equal(got.Start, want.Start) ||
			(got.End == nil) != (want.End == nil) || !bytes.Equal(got.End, want.End) {
			t.Errorf("#%d: round trip = %+v, want %+v", i, got, want)
		}
	}
}

func TestTokenRejects(t *testing.T) {
	c := NewCodec([]byte("secret"))
	good := c.Encode(Token{Revision: 3, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")})
	other := NewCodec([]byte("other")).Encode(Token{Revision: 3, Next: []byte("a/b"), Start: []byte("a/"), End: []byte("a0")})
	// A correctly signed token whose fields do not parse: the MAC is checked first,
	// so build it with the codec's own key.
	signed := func(body []byte) string { return tokenEncoding.EncodeToString(c.sum(body, body)) }
	tests := []string{
		"", "a", "====", other,
		good[:len(good)-2],
		signed([]byte{2, 3, 1, 'a', 0, 0}),    // unknown version
		signed([]byte{1, 3, 0, 0, 0}),         // empty next key
		signed([]byte{1, 3, 1, 'a', 0, 2}),    // bad end flag
		signed([]byte{1, 3, 1, 'a', 0, 0, 9}), // trailing bytes
		signed([]byte{1, 3, 9, 'a'}),          // next length past the end
		signed([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 1, 'a', 0, 0}), // revision > MaxInt64
		string(bytes.Repeat([]byte("A"), maxTokenChars+4)),
		good[:8] + "\n" + good[8:], // the decoder skips line breaks: a second string of the token
		good + "\r\n",
	}
	for i, s := range tests {
		if _, err := c.Decode(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("#%d: decode(%.20q) = %v, want ErrInvalid", i, s, err)
		}
	}
}

// TestTokenCheckRange: the token must be used with the range it was issued for, and
// its next key must lie inside it.
//
//	range [a/, a0): a/b inside; a0 and a. outside
func TestTokenCheckRange(t *testing.T) {
	tok := func(next, start, end string, hasEnd bool) Token {
		t := Token{Revision: 1, Next: []byte(next), Start: []byte(start)}
		if start == "" {
			t.Start = nil
		}
		if hasEnd {
			t.End = []byte(end)
		}
		return t
	}
	tests := []struct {
		tok        Token
		start, end []byte
		ok         bool
	}{
		{tok("a/b", "a/", "a0", true), []byte("a/"), []byte("a0"), true},
		{tok("a/", "a/", "a0", true), []byte("a/"), []byte("a0"), true},
		{tok("a0", "a/", "a0", true), []byte("a/"), []byte("a0"), false},
		{tok("a.", "a/", "a0", true), []byte("a/"), []byte("a0"), false},
		{tok("a/b", "a/", "a0", true), []byte("b/"), []byte("b0"), false},
		{tok("a/b", "a/", "a0", true), nil, nil, false},
		{tok("zzz", "", "", false), nil, nil, true},
		{tok("a/b", "", "", false), []byte("a/"), []byte("a0"), false},
		{tok("a/b", "a/", "", false), []byte("a/"), []byte("a0"), false},
		// Another start alone (same end), the next key inside both ranges: a token
		// minted for [a/, z) replayed on [b/, z) would skip nothing it could not read,
		// yet it is another scan's token.
		{tok("b/x", "a/", "z", true), []byte("b/"), []byte("z"), false},
		{tok("b/x", "b/", "z", true), []byte("a/"), []byte("z"), false},
		{tok("b/x", "b/", "z", true), []byte("b/"), []byte("z"), true},
	}
	for i, tt := range tests {
		err := tt.tok.CheckRange(tt.start, tt.end)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("#%d: checkRange = %v, want ok %v", i, err, tt.ok)
		}
	}
}
