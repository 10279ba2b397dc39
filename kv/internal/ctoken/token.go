package ctoken

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"strings"
	"sync"
)

// Token says where a paged scan resumes. It is what the opaque ?continue=
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
type Token struct {
	Revision int64  // revision of every page; 0 = the latest at the next page
	Next     []byte // first key not yet visited; never empty
	Start    []byte // range start of the scan; nil = the beginning of the keyspace
	End      []byte // range end (exclusive); nil = the end of the keyspace
}

// Token wire formats (then base64url without padding). Both carry the same fields:
//
//	fields = uvarint(Revision) uvarint(len Next) Next uvarint(len Start) Start
//	         [0 | 1 = End present] (uvarint(len End) End)?
//
// Version 1 (issued only while some voter runs a release that cannot read version 2;
// see kv's Server.tokenVersion):
//
//	[0x01] fields HMAC-SHA256(macKey, all before)
//
// It is signed but not encrypted: anyone holding one reads the next key, which was a
// key the caller may not have been allowed to read (a list filtered by ACLs walked the
// whole store one token at a time).
//
// Version 2 (issued once every voter reads it): the fields sealed with AES-256-GCM, so
// a token says nothing but its length:
//
//	[0x02] salt[16] AES-256-GCM(key = HMAC-SHA256(aeadKey, salt), nonce = 0, fields,
//	                            additional data = [0x02])
//	salt = HMAC-SHA256(saltKey, fields)[:16]
//
// The salt is synthetic (as in SIV): the same position always gives the same token,
// and a decoder recomputes it and refuses a token whose salt does not match, so every
// accepted string is the one encoding of its token. Each salt picks its own GCM key:
// a key seals only the one plaintext its salt was computed from, so the zero nonce
// never covers two different messages, and there is no bound of 2^32 tokens per
// cluster secret as random 96-bit nonces under one key would impose. Equal tokens
// look equal — they tell only what their holder knows anyway. saltKey and aeadKey
// are derived from the cluster secret with HKDF-SHA256, each for its one purpose.
//
// Compatibility: in a mixed-release cluster a client may get a token from one node and
// ask another for the next page, in either direction. A new node reads version 1, and
// issues it while some voter runs a release before version 2 (those read only version
// 1): refusing either would fail a scan in the middle of a rolling upgrade or a
// downgrade. Version 1 names only a key the caller may read (scan resumes at
// readable keys), so in that window the token tells its holder nothing it may not
// know. The first byte stays the format version so the layout can change again
// without breaking tokens in flight. Version1 and Version2 are that first byte.
const (
	// Version1 is the signed, not encrypted, format.
	Version1 byte = 1
	// Version2 is the sealed format, issued once every voter reads it.
	Version2 byte = 2
)

const (
	tokenMACSize  = sha256.Size
	tokenSaltSize = 16
	tokenTagSize  = 16 // AES-GCM's
	// maxTokenChars bounds the encoded token before any decoding work (three keys of
	// up to a few KiB each, base64).
	maxTokenChars = 64 << 10
)

// tokenEncoding writes the canonical base64url of a token and reads only that: a
// lenient decoder ignores the unused low bits of the last character, so "…OVZ" and
// "…OVY" would be two strings of one token (found by FuzzDecodeToken). Decode also
// refuses the line breaks every base64 decoder skips.
var tokenEncoding = base64.RawURLEncoding.Strict()

// ErrInvalid: a continue token is garbled, tampered with, signed by another cluster,
// or used for a range it was not issued for. Its text is what every door has always
// answered; package kv re-exports the same value as kv.ErrInvalidContinueToken.
var ErrInvalid = errors.New("kv: invalid continue token")

// Codec seals and opens continue tokens with keys derived from the replicated
// cluster secret, so every node of a cluster accepts the tokens of every other node
// (and its own, after restarts), and no other cluster's tokens. Safe for concurrent
// use.
type Codec struct {
	macs  sync.Pool // of hash.Hash: HMAC-SHA256 keyed with the version 1 MAC key
	salts sync.Pool // of hash.Hash: HMAC-SHA256 keyed with the version 2 salt key
	seals sync.Pool // of hash.Hash: HMAC-SHA256 keyed with the version 2 AEAD key
}

// NewCodec derives the token keys from the cluster secret, each bound to its
// purpose so the secret can key other things without one standing for another. The
// version 1 MAC key keeps the derivation of the releases that issued version 1.
func NewCodec(secret []byte) *Codec {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("keel continue token"))
	macKey := mac.Sum(nil)
	c := &Codec{}
	c.macs.New = func() any { return hmac.New(sha256.New, macKey) }
	c.salts.New = hmacPool(secret, "keel continue token v2 salt")
	c.seals.New = hmacPool(secret, "keel continue token v2 aead")
	return c
}

// hmacPool returns the New of a pool of HMAC-SHA256 keyed with a key derived from
// secret for purpose.
func hmacPool(secret []byte, purpose string) func() any {
	key, err := hkdf.Key(sha256.New, secret, nil, purpose, 32)
	if err != nil {
		panic(err) // only for a key length HKDF-SHA256 cannot produce; 32 it can
	}
	return func() any { return hmac.New(sha256.New, key) }
}

// appendFields appends t's fields (the part both versions share).
func appendFields(b []byte, t Token) []byte {
	b = binary.AppendUvarint(b, uint64(t.Revision))
	b = appendBytes(b, t.Next)
	b = appendBytes(b, t.Start)
	if t.End == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	return appendBytes(b, t.End)
}

func fieldsLen(t Token) int {
	return 4*binary.MaxVarintLen64 + len(t.Next) + len(t.Start) + 1 + len(t.End)
}

// EncodeAs returns the token string for t in format version (Version1 or 2).
func (c *Codec) EncodeAs(version byte, t Token) string {
	if version != Version1 {
		return c.Encode(t)
	}
	b := appendFields([]byte{Version1}, t)
	return tokenEncoding.EncodeToString(c.sum(b, b))
}

// Encode returns the opaque token string for t, in version 2.
func (c *Codec) Encode(t Token) string {
	b := make([]byte, 1+tokenSaltSize, 1+tokenSaltSize+fieldsLen(t)+tokenTagSize)
	b[0] = Version2
	plain := appendFields(b, t)[len(b):] // sealed in place
	salt := c.salt(b[1:1:1+tokenSaltSize], plain)
	return tokenEncoding.EncodeToString(c.aead(salt).Seal(b, zeroNonce[:], plain, b[:1]))
}

var zeroNonce [12]byte

// salt appends the synthetic salt of fields to dst (which must have room for it).
func (c *Codec) salt(dst, fields []byte) []byte {
	var sum [sha256.Size]byte
	return append(dst, pooledMAC(&c.salts, sum[:0], fields)[:tokenSaltSize]...)
}

// pooledMAC appends the HMAC of b, with a hash from pool, to dst.
func pooledMAC(pool *sync.Pool, dst, b []byte) []byte {
	mac := pool.Get().(hash.Hash)
	mac.Reset()
	mac.Write(b)
	dst = mac.Sum(dst)
	pool.Put(mac)
	return dst
}

// aead returns the AES-256-GCM of one token: its key is the HMAC of the salt.
func (c *Codec) aead(salt []byte) cipher.AEAD {
	var key [sha256.Size]byte
	block, err := aes.NewCipher(pooledMAC(&c.seals, key[:0], salt))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	g, err := cipher.NewGCM(block)
	if err != nil {
		panic(err) // AES has the 16-byte block GCM needs
	}
	return g
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// sum appends the version 1 MAC of b to dst.
func (c *Codec) sum(dst, b []byte) []byte { return pooledMAC(&c.macs, dst, b) }

// Decode parses and authenticates a token string. Every failure wraps
// ErrInvalid and says what was wrong, never which byte of the MAC.
func (c *Codec) Decode(s string) (Token, error) {
	if len(s) > maxTokenChars {
		return Token{}, fmt.Errorf("%w: %d characters, more than %d", ErrInvalid, len(s), maxTokenChars)
	}
	raw, err := tokenEncoding.DecodeString(s)
	if err != nil || strings.ContainsAny(s, "\r\n") {
		return Token{}, fmt.Errorf("%w: not base64url", ErrInvalid)
	}
	var fields []byte
	switch {
	case len(raw) == 0:
		return Token{}, fmt.Errorf("%w: empty", ErrInvalid)
	case raw[0] == Version2:
		if len(raw) < 1+tokenSaltSize+tokenTagSize {
			return Token{}, fmt.Errorf("%w: too short", ErrInvalid)
		}
		salt, sealed := raw[1:1+tokenSaltSize], raw[1+tokenSaltSize:]
		fields, err = c.aead(salt).Open(sealed[:0], zeroNonce[:], sealed, raw[:1])
		var want [tokenSaltSize]byte
		if err != nil || !hmac.Equal(c.salt(want[:0], fields), salt) {
			return Token{}, fmt.Errorf("%w: cannot open it (tampered, or issued by another cluster)", ErrInvalid)
		}
	case raw[0] == Version1:
		if len(raw) < 1+tokenMACSize {
			return Token{}, fmt.Errorf("%w: too short", ErrInvalid)
		}
		body := raw[:len(raw)-tokenMACSize]
		var sum [tokenMACSize]byte
		if !hmac.Equal(c.sum(sum[:0], body), raw[len(body):]) {
			return Token{}, fmt.Errorf("%w: signature mismatch (tampered, or issued by another cluster)", ErrInvalid)
		}
		fields = body[1:]
	default:
		return Token{}, fmt.Errorf("%w: unknown format version %d", ErrInvalid, raw[0])
	}
	t, err := parseToken(fields)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return t, nil
}

// parseToken parses the authenticated fields.
func parseToken(b []byte) (Token, error) {
	var t Token
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

// CheckRange verifies the token was issued for the scan [start, end) and that its
// next key lies inside it.
func (t Token) CheckRange(start, end []byte) error {
	if !bytes.Equal(t.Start, start) || (t.End == nil) != (end == nil) || !bytes.Equal(t.End, end) {
		return fmt.Errorf("%w: issued for another range (another prefix)", ErrInvalid)
	}
	if bytes.Compare(t.Next, start) < 0 || (end != nil && bytes.Compare(t.Next, end) >= 0) {
		return fmt.Errorf("%w: next key outside the scan's range", ErrInvalid)
	}
	return nil
}
