package kv

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"sync"
)

// continueToken says where a paged scan resumes. It is what the opaque ?continue=
// string of a list carries.
//
// A scan of the prefix "app/" at revision 42 that has returned app/a..app/m carries
//
//	Revision 42, Next "app/n", Start "app/", End "app0"   (End = fsm.PrefixEnd(Start))
//
// and the next page is Range(Next, End) at revision 42. The server rejects a token
// whose Start/End differ from the range of the request it comes with, and one whose
// Next lies outside [Start, End), so a token can never be used to read keys outside
// the range it was issued for. Revision 0 marks an *inconsistent* token (issued with a
// 410 after compaction): its next page is served at the latest revision, and the
// tokens after it carry that revision again.
type continueToken struct {
	Revision int64  // revision of every page; 0 = the latest at the next page
	Next     []byte // first key not yet visited; never empty
	Start    []byte // range start of the scan; nil = the beginning of the keyspace
	End      []byte // range end (exclusive); nil = the end of the keyspace
}

// Token wire format, version 1 (then base64url without padding):
//
//	[0x01] uvarint(Revision) uvarint(len Next) Next uvarint(len Start) Start
//	[0 | 1 = End present] (uvarint(len End) End)? HMAC-SHA256(tokenKey, all before)
//
// The first byte is the format version so the layout can change without breaking
// tokens in flight: a new release keeps decoding version 1.
const (
	tokenVersion1 byte = 1
	tokenMACSize       = sha256.Size
	// maxTokenChars bounds the encoded token before any decoding work (three keys of
	// up to a few KiB each, base64).
	maxTokenChars = 64 << 10
)

var tokenEncoding = base64.RawURLEncoding

// tokenCodec signs and verifies continue tokens with a key derived from the
// replicated cluster secret, so every node of a cluster accepts the tokens of every
// other node (and its own, after restarts), and no other cluster's tokens. Safe for
// concurrent use.
type tokenCodec struct {
	macs sync.Pool // of hash.Hash: HMAC-SHA256 keyed with the token key
}

// newTokenCodec derives the token key from the cluster secret, bound to its purpose so
// the secret can sign other things later without one signature standing for another.
func newTokenCodec(secret []byte) *tokenCodec {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("keel continue token"))
	key := mac.Sum(nil)
	c := &tokenCodec{}
	c.macs.New = func() any { return hmac.New(sha256.New, key) }
	return c
}

// encode returns the opaque token string for t.
func (c *tokenCodec) encode(t continueToken) string {
	n := 1 + 4*binary.MaxVarintLen64 + len(t.Next) + len(t.Start) + 1 + len(t.End) + tokenMACSize
	b := make([]byte, 0, n)
	b = append(b, tokenVersion1)
	b = binary.AppendUvarint(b, uint64(t.Revision))
	b = appendBytes(b, t.Next)
	b = appendBytes(b, t.Start)
	if t.End == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendBytes(b, t.End)
	}
	b = c.sum(b, b)
	return tokenEncoding.EncodeToString(b)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// sum appends the MAC of b to dst.
func (c *tokenCodec) sum(dst, b []byte) []byte {
	mac := c.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write(b)
	dst = mac.Sum(dst)
	c.macs.Put(mac)
	return dst
}

// decode parses and authenticates a token string. Every failure wraps
// ErrInvalidContinueToken and says what was wrong, never which byte of the MAC.
func (c *tokenCodec) decode(s string) (continueToken, error) {
	if len(s) > maxTokenChars {
		return continueToken{}, fmt.Errorf("%w: %d characters, more than %d", ErrInvalidContinueToken, len(s), maxTokenChars)
	}
	raw, err := tokenEncoding.DecodeString(s)
	if err != nil {
		return continueToken{}, fmt.Errorf("%w: not base64url", ErrInvalidContinueToken)
	}
	if len(raw) < 1+tokenMACSize {
		return continueToken{}, fmt.Errorf("%w: too short", ErrInvalidContinueToken)
	}
	if raw[0] != tokenVersion1 {
		return continueToken{}, fmt.Errorf("%w: unknown format version %d", ErrInvalidContinueToken, raw[0])
	}
	body := raw[:len(raw)-tokenMACSize]
	var sum [tokenMACSize]byte
	if !hmac.Equal(c.sum(sum[:0], body), raw[len(body):]) {
		return continueToken{}, fmt.Errorf("%w: signature mismatch (tampered, or issued by another cluster)", ErrInvalidContinueToken)
	}
	t, err := parseToken(body[1:])
	if err != nil {
		return continueToken{}, fmt.Errorf("%w: %v", ErrInvalidContinueToken, err)
	}
	return t, nil
}

// parseToken parses the authenticated fields after the version byte.
func parseToken(b []byte) (continueToken, error) {
	var t continueToken
	rev, n := binary.Uvarint(b)
	if n <= 0 || rev > math.MaxInt64 {
		return t, errors.New("bad revision")
	}
	t.Revision, b = int64(rev), b[n:]
	var err error
	if t.Next, b, err = readBytes(b, "next key"); err != nil {
		return t, err
	}
	if t.Start, b, err = readBytes(b, "range start"); err != nil {
		return t, err
	}
	if len(b) == 0 || b[0] > 1 {
		return t, errors.New("bad range end flag")
	}
	if hasEnd := b[0] == 1; hasEnd {
		if t.End, b, err = readBytes(b[1:], "range end"); err != nil {
			return t, err
		}
		if t.End == nil {
			t.End = []byte{}
		}
	} else {
		b = b[1:]
	}
	if len(b) != 0 {
		return t, fmt.Errorf("%d trailing bytes", len(b))
	}
	if len(t.Next) == 0 {
		return t, errors.New("empty next key")
	}
	return t, nil
}

// readBytes reads a uvarint length and that many bytes; zero length reads as nil.
func readBytes(b []byte, what string) (field, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, fmt.Errorf("bad %s length", what)
	}
	b = b[n:]
	if l == 0 {
		return nil, b, nil
	}
	return b[:l:l], b[l:], nil
}

// checkRange verifies the token was issued for the scan [start, end) and that its
// next key lies inside it.
func (t continueToken) checkRange(start, end []byte) error {
	if !bytes.Equal(t.Start, start) || (t.End == nil) != (end == nil) || !bytes.Equal(t.End, end) {
		return fmt.Errorf("%w: issued for another range (another prefix)", ErrInvalidContinueToken)
	}
	if bytes.Compare(t.Next, start) < 0 || (end != nil && bytes.Compare(t.Next, end) >= 0) {
		return fmt.Errorf("%w: next key outside the scan's range", ErrInvalidContinueToken)
	}
	return nil
}
