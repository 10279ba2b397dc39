package kv

import (
	"bytes"

	"github.com/keel-kv/keel/fsm"
)

// Raw reads of typed resources' keys. A typed resource's objects are stored as plain
// keys under its prefix (and, during a key migration, under the migration's new
// prefix too), which the KV API can name. Writes there are refused whatever the token
// (checkReservedWrites); a raw read there needs, besides the key rule, the read right
// on the resource, so that the typed and raw views of the same keys follow the same
// rules. The guard is the server's schema at the time of the check, so a resource
// added by keel schema apply is guarded at once.

// resourceGuard calls yield with the key prefix, group and resource of every typed
// resource's key range, until yield returns false.
type resourceGuard func(yield func(prefix, group, resource string) bool)

// resourceGuard is the server's: the resources of its current schema.
func (s *Server) resourceGuard(yield func(prefix, group, resource string) bool) {
	p := s.resources.Load()
	if p == nil {
		return
	}
	for _, r := range (*p).Schema().Resources {
		if !yield(r.Prefix, r.Group, r.Name) {
			return
		}
		if k := r.KeyMigration; k != nil && !yield(k.To, r.Group, r.Name) {
			return
		}
	}
}

// guardedKey reports whether key lies in the range of a resource the token may not
// read (write).
func (a *authorizer) guardedKey(key []byte, write bool) bool {
	denied := false
	if a.guard != nil {
		a.guard(func(prefix, group, resource string) bool {
			denied = bytes.HasPrefix(key, []byte(prefix)) && !a.resource(group, resource, write)
			return !denied
		})
	}
	return denied
}

// guardedSpan reports whether [start, end) meets the range of a resource the token may
// not read (write).
func (a *authorizer) guardedSpan(start, end []byte, write bool) bool {
	denied := false
	if a.guard != nil {
		a.guard(func(prefix, group, resource string) bool {
			denied = overlaps(start, end, []byte(prefix)) && !a.resource(group, resource, write)
			return !denied
		})
	}
	return denied
}

// pastGuarded returns the end of the denied resource range that holds key, or nil
// when key is in none (for nextReadable).
func (a *authorizer) pastGuarded(key []byte) []byte {
	var next []byte
	if a.guard != nil {
		a.guard(func(prefix, group, resource string) bool {
			if bytes.HasPrefix(key, []byte(prefix)) && !a.resource(group, resource, false) {
				if next = fsm.PrefixEnd([]byte(prefix)); next == nil {
					next = []byte{} // to the end of the keyspace: nothing readable is left
				}
				return false
			}
			return true
		})
	}
	return next
}

// guardCount is how many resource ranges guard the keyspace now.
func (a *authorizer) guardCount() int {
	n := 0
	if a.guard != nil {
		a.guard(func(string, string, string) bool { n++; return true })
	}
	return n
}
