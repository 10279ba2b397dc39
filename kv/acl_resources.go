package kv

import (
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/versions"
)

// guardCache is the typed resources' key ranges of one schema (the schema is
// immutable: a new one replaces it).
type guardCache struct {
	schema *versions.Schema
	ranges []acl.GuardRange
}

// resourceGuard is the server's acl.Guard: the ranges of its current schema
// (acl.GuardRanges), rebuilt only when the schema changes.
func (s *Server) resourceGuard() []acl.GuardRange {
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
	c := &guardCache{schema: sc, ranges: acl.GuardRanges(sc)}
	s.guards.Store(c)
	return c.ranges
}
