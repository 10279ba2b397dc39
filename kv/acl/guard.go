package acl

import (
	"bytes"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// Raw reads of typed resources' keys. A typed resource's objects are stored as plain
// keys under its prefix (and, during a key migration, under the migration's new
// prefix too), which the KV API can name. Writes there are refused whatever the token
// (package kv's reserved-prefix rule); a raw read there needs, besides the key rule,
// the read right on the resource, so that the typed and raw views of the same keys
// follow the same rules. The Guard is asked at the time of each check, so a resource
// added by keel schema apply is guarded at once.
//
//	schema: widgets under "w/"; token: read "" (keys), no resource right
//	Key("w/a", read)       = false   (w/ is widgets')
//	Span("a", "z", read)   = false   (the range meets w/)
//	NextReadable("w/a")    = "w0"    (past widgets' range)

// GuardRange is the key range of a typed resource.
type GuardRange struct {
	Prefix          []byte
	Group, Resource string
}

// Guard returns the key ranges of the typed resources now. It is called on every
// check, concurrently: it must be cheap and safe for concurrent use.
type Guard func() []GuardRange

// GuardRanges returns the key ranges of sc's resources: each one's prefix, and the
// new prefix of a key migration in progress.
func GuardRanges(sc *versions.Schema) []GuardRange {
	var out []GuardRange
	for _, r := range sc.Resources {
		out = append(out, GuardRange{Prefix: []byte(r.Prefix), Group: r.Group, Resource: r.Name})
		if k := r.KeyMigration; k != nil {
			out = append(out, GuardRange{Prefix: []byte(k.To), Group: r.Group, Resource: r.Name})
		}
	}
	return out
}

// guards is the ranges the token is checked against (none without a guard).
func (a *Authorizer) guards() []GuardRange {
	if a.guard == nil {
		return nil
	}
	return a.guard()
}

// guardedKey reports whether key lies in the range of a resource the token may not
// read (write).
func (a *Authorizer) guardedKey(key []byte, write bool) bool {
	for _, g := range a.guards() {
		if bytes.HasPrefix(key, g.Prefix) && !a.Resource(g.Group, g.Resource, write) {
			return true
		}
	}
	return false
}

// guardedSpan reports whether [start, end) meets the range of a resource the token may
// not read (write).
func (a *Authorizer) guardedSpan(start, end []byte, write bool) bool {
	for _, g := range a.guards() {
		if overlaps(start, end, g.Prefix) && !a.Resource(g.Group, g.Resource, write) {
			return true
		}
	}
	return false
}

// pastGuarded returns the end of the denied resource range that holds key ([]byte{}:
// to the end of the keyspace), or nil when key is in none (for NextReadable).
func (a *Authorizer) pastGuarded(key []byte) []byte {
	for _, g := range a.guards() {
		if bytes.HasPrefix(key, g.Prefix) && !a.Resource(g.Group, g.Resource, false) {
			if next := fsm.PrefixEnd(g.Prefix); next != nil {
				return next
			}
			return []byte{}
		}
	}
	return nil
}
