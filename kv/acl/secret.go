package acl

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
// Only its SHA-256 is stored (in Raft, under TokensPrefix); the secret is shown
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

// NewSecret returns a fresh random token secret.
func NewSecret() (string, error) {
	var b [secretRandBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return secretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ParseBearer extracts the secret of an Authorization header value: "Bearer SECRET"
// (the scheme is case-insensitive, one or more spaces after it). An empty header is
// ErrNoToken; anything else that is not a well-formed secret is ErrMalformedToken.
func ParseBearer(header string) (string, error) {
	if header == "" {
		return "", ErrNoToken
	}
	if len(header) > maxAuthHeader {
		return "", ErrMalformedToken
	}
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrMalformedToken
	}
	secret := strings.TrimLeft(rest, " ")
	if err := CheckSecret(secret); err != nil {
		return "", err
	}
	return secret, nil
}

// CheckSecret reports whether s has the shape of a secret NewSecret makes.
func CheckSecret(s string) error {
	if len(s) != secretLen || !strings.HasPrefix(s, secretPrefix) {
		return ErrMalformedToken
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s[len(secretPrefix):])
	if err != nil || len(b) != secretRandBytes {
		return ErrMalformedToken
	}
	return nil
}

// SecretHash is the stored form of a secret.
type SecretHash [sha256.Size]byte

// HashSecret is the stored form of secret.
func HashSecret(secret string) SecretHash { return sha256.Sum256([]byte(secret)) }

// String is the hex form of h (what names the token's record).
func (h SecretHash) String() string { return hex.EncodeToString(h[:]) }

// ParseSecretHash decodes the hex form of a stored hash.
func ParseSecretHash(s string) (SecretHash, error) {
	var h SecretHash
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(h) {
		return h, errors.New("kv: acl: bad secret hash")
	}
	copy(h[:], b)
	return h, nil
}

// NewAccessorID returns a random public ID for a token (16 bytes, hex).
func NewAccessorID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
