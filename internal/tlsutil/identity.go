package tlsutil

import (
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Errors of certificate identity.
var (
	// ErrNoIdentity: the certificate carries no keel identity URI.
	ErrNoIdentity = errors.New("tlsutil: certificate carries no keel identity (URI SAN keel://node/ID or keel://client/NAME)")
	// ErrBadIdentity: a keel identity URI that does not parse.
	ErrBadIdentity = errors.New("tlsutil: bad keel identity")
)

// Kind says what a certificate identifies.
type Kind string

const (
	// KindNode: a keel server; only node certificates may use the Raft/RPC port.
	KindNode Kind = "node"
	// KindClient: a user or program of the HTTP API.
	KindClient Kind = "client"
)

// Identity is who a certificate names. It is written in the certificate as one URI
// SAN, "keel://node/<id>" or "keel://client/<name>", where id and name follow the node
// ID rule (1-63 of [A-Za-z0-9._-], starting with a letter or digit). A certificate
// with two keel identities is refused: it would be two things at once.
type Identity struct {
	Kind Kind
	Name string
}

// URI is the identity as written in a certificate.
func (id Identity) URI() string { return identityScheme + string(id.Kind) + "/" + id.Name }

func (id Identity) String() string { return string(id.Kind) + " " + id.Name }

const identityScheme = "keel://"

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseIdentity parses "keel://node/<id>" or "keel://client/<name>". Anything else —
// another scheme, a path with more parts, a query, an empty or oversized name — is
// ErrBadIdentity. The scheme and kind are compared exactly (lower case), so one
// identity has one spelling.
func ParseIdentity(uri string) (Identity, error) {
	rest, ok := strings.CutPrefix(uri, identityScheme)
	if !ok {
		return Identity{}, fmt.Errorf("%w: %q does not start with %s", ErrBadIdentity, clip(uri), identityScheme)
	}
	kind, name, ok := strings.Cut(rest, "/")
	if !ok {
		return Identity{}, fmt.Errorf("%w: %q: want keel://node/ID or keel://client/NAME", ErrBadIdentity, clip(uri))
	}
	switch Kind(kind) {
	case KindNode, KindClient:
	default:
		return Identity{}, fmt.Errorf("%w: %q: kind %q is neither node nor client", ErrBadIdentity, clip(uri), clip(kind))
	}
	if !namePattern.MatchString(name) {
		return Identity{}, fmt.Errorf("%w: %q: name %q: want 1-63 of [A-Za-z0-9._-], starting with a letter or digit",
			ErrBadIdentity, clip(uri), clip(name))
	}
	return Identity{Kind: Kind(kind), Name: name}, nil
}

// IdentityOf returns the keel identity of cert: its one URI SAN with the keel scheme.
// URIs of other schemes are ignored (a certificate may serve other systems too).
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != "keel" {
			continue
		}
		id, err := ParseIdentity(u.String())
		if err != nil {
			return Identity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("%w: the certificate names %d keel identities; want one", ErrBadIdentity, len(found))
}

// clip keeps error messages about hostile input short.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
