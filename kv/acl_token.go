package kv

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
)

// ACL token secrets. A secret is "keel_" followed by 43 base64url characters (32
// random bytes, no padding):
//
//	keel_3q2-7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA
//
// Only its SHA-256 is stored (in Raft, under aclTokensPrefix); the secret is shown
// once, in the answer that created it. A request carries it as
// `Authorization: Bearer <secret>`. 256 bits of entropy make an unsalted hash safe:
// the stored hash cannot be turned back into a secret, and a lookup by hash leaks
// nothing an attacker could use to forge one.
const (
	secretPrefix    = "keel_"
	secretRandBytes = 32
	secretLen       = len(secretPrefix) + 43 // base64.RawURLEncoding of 32 bytes
	// maxAuthHeader bounds the Authorization header before any parsing work.
	maxAuthHeader = 256
)

// Errors of token parsing. Their messages never contain the token.
var (
	errNoToken        = errors.New("no token: this request needs `Authorization: Bearer <secret>` (keel -token or KEEL_TOKEN)")
	errMalformedToken = errors.New("malformed token: want `Authorization: Bearer keel_...` with the secret keel printed at creation")
	errUnknownToken   = errors.New("token not found: it was deleted, mistyped, or belongs to another cluster")
)

// newSecret returns a fresh random token secret.
func newSecret() (string, error) {
	var b [secretRandBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// parseBearer extracts the secret of an Authorization header value: "Bearer SECRET"
// (the scheme is case-insensitive, one or more spaces after it). An empty header is
// errNoToken; anything else that is not a well-formed secret is errMalformedToken.
func parseBearer(header string) (string, error) {
	if header == "" {
		return "", errNoToken
	}
	if len(header) > maxAuthHeader {
		return "", errMalformedToken
	}
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errMalformedToken
	}
	secret := strings.TrimLeft(rest, " ")
	if err := checkSecret(secret); err != nil {
		return "", err
	}
	return secret, nil
}

// checkSecret reports whether s has the shape of a secret newSecret makes.
func checkSecret(s string) error {
	if len(s) != secretLen || !strings.HasPrefix(s, secretPrefix) {
		return errMalformedToken
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s[len(secretPrefix):])
	if err != nil || len(b) != secretRandBytes {
		return errMalformedToken
	}
	return nil
}

// secretHash is the stored form of a secret.
type secretHash [sha256.Size]byte

func hashSecret(secret string) secretHash { return sha256.Sum256([]byte(secret)) }

func (h secretHash) String() string { return hex.EncodeToString(h[:]) }

// parseSecretHash decodes the hex form of a stored hash.
func parseSecretHash(s string) (secretHash, error) {
	var h secretHash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, errors.New("kv: acl: bad secret hash")
	}
	copy(h[:], b)
	return h, nil
}

// newAccessorID returns a random public ID for a token (16 bytes, hex).
func newAccessorID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
