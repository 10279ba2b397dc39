package acl

import (
	"errors"
	"fmt"

	"github.com/keel-kv/keel/kv/api"
)

// The engine's refusals. Their texts are what every door has always answered (clients
// and tests read them), hence the kv prefix: package kv re-exports the same values as
// kv.ErrUnauthorized and kv.ErrForbidden, and maps them to each protocol's status.
var (
	// ErrUnauthorized: ACLs are enforced and the request carries no valid token (none,
	// malformed, unknown, or expired).
	ErrUnauthorized = errors.New("kv: unauthorized")
	// ErrForbidden: the request's token lacks the right the request needs.
	ErrForbidden = errors.New("kv: forbidden")
)

// Errors of token parsing, wrapped in ErrUnauthorized by the door that parses. Their
// messages never contain the token.
var (
	ErrNoToken        = errors.New("no token: this request needs `Authorization: Bearer <secret>` (keel -token or KEEL_TOKEN)")
	ErrMalformedToken = errors.New("malformed token: want `Authorization: Bearer keel_...` with the secret keel printed at creation")
	ErrUnknownToken   = errors.New("token not found: it was deleted, mistyped, or belongs to another cluster")
)

// PolicyError is a policy that cannot be stored: it fails [ValidatePolicy], or it is
// the built-in management policy ([CheckPolicyWritable]). Reason names the bad field;
// the door wraps it in its bad-request error.
type PolicyError struct {
	Reason string
}

func (e *PolicyError) Error() string { return e.Reason }

func policyErrorf(format string, args ...any) error {
	return &PolicyError{Reason: fmt.Sprintf(format, args...)}
}

// AccessWord names the access of a request: "write" or "read".
func AccessWord(write bool) string {
	if write {
		return api.AccessWrite
	}
	return api.AccessRead
}

// Errors naming the missing right; never the data. Each wraps ErrForbidden.

// ForbiddenKey refuses the read (write) of key.
func ForbiddenKey(key []byte, write bool) error {
	return fmt.Errorf("%w: the token has no %s right on key %q", ErrForbidden, AccessWord(write), key)
}

// ForbiddenRange refuses the read (write) of [start, end).
func ForbiddenRange(start, end []byte, write bool) error {
	return fmt.Errorf("%w: the token has no %s right on every key of [%q, %q)", ErrForbidden, AccessWord(write), start, end)
}

// ForbiddenRight refuses a request that needs operator right right.
func ForbiddenRight(right string) error {
	return fmt.Errorf("%w: the token lacks the operator right %q", ErrForbidden, right)
}

// ForbiddenResource refuses the read (write) of objects of group/resource.
func ForbiddenResource(group, resource string, write bool) error {
	return fmt.Errorf("%w: the token has no %s right on resource %s/%s", ErrForbidden, AccessWord(write), group, resource)
}
