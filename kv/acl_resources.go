package kv

import (
	"bytes"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// Raw reads of typed resources' keys. A typed resource's objects are stored as plain
// keys under its prefix (and, during a key migration, under the migration's new
// prefix too), which the KV API can name. Writes there are refused whatever the token
// (checkReservedWrites); a raw read there needs, besides the key rule, the read right
// on the resource, so that the typed and raw views of the same keys follow the same
// rules. The guard is the server's schema at the time of the check, so a resource
// added by keel schema apply is guarded at once.

// guardRange is the key range of a typed resource.
type guardRange struct {
	prefix          []byte
	group, resource string
}

// resourceGuard returns the key ranges of the typed resources now.
type resourceGuard func() []guardRange

// guardCache is the ranges of one schema (the schema is immutable: a new one replaces it).
type guardCache struct {
	schema *versions.Schema
	ranges []guardRange
}

// resourceGuard is the server's: the ranges of its current schema, rebuilt only when
// the schema changes.
func (s *Server) resourceGuard() []guardRange {
	p := s.resources.Load()
	if p == nil {
		return nil
	}
	sc := (*p).Schema()
	if sc == nil {
		return nil
	}
	if c := s.guards.Load(); c != nil && c.schema == sc {
		return c.ranges
	}
	c := &guardCache{schema: sc}
	for _, r := range sc.Resources {
		c.ranges = append(c.ranges, guardRange{prefix: []byte(r.Prefix), group: r.Group, resource: r.Name})
		if k := r.KeyMigration; k != nil {
			c.ranges = append(c.ranges, guardRange{prefix: []byte(k.To), group: r.Group, resource: r.Name})
		}
	}
	s.guards.Store(c)
	return c.ranges
}

// guards is the ranges the token is checked against (none without a guard).
func (a *authorizer) guards() []guardRange {
	if a.guard == nil {
		return nil
	}
	return a.guard()
}

// guardedKey reports whether key lies in the range of a resource the token may not
// read (write).
func (a *authorizer) guardedKey(key []byte, write bool) bool {
	for _, g := range a.guards() {
		if bytes.HasPrefix(key, g.prefix) && !a.resource(g.group, g.resource, write) {
			return true
		}
	}
	return false
}

// guardedSpan reports whether [start, end) meets the range of a resource the token may
// not read (write).
func (a *authorizer) guardedSpan(start, end []byte, write bool) bool {
	for _, g := range a.guards() {
		if overlaps(start, end, g.prefix) && !a.resource(g.group, g.resource, write) {
			return true
		}
	}
	return false
}

// pastGuarded returns the end of the denied resource range that holds key ([]byte{}:
// to the end of the keyspace), or nil when key is in none (for nextReadable).
func (a *authorizer) pastGuarded(key []byte) []byte {
	for _, g := range a.guards() {
		if bytes.HasPrefix(key, g.prefix) && !a.resource(g.group, g.resource, false) {
			if next := fsm.PrefixEnd(g.prefix); next != nil {
				return next
			}
			return []byte{}
		}
	}
	return nil
}
