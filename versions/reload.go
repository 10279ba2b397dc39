package versions

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/keel-kv/keel/fsm"
)

// SchemaChange is what ApplySchema changed (or, refused, would have changed): the
// answer of PUT /v1/agent/schema.
type SchemaChange struct {
	File    string   `json:"file"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	// Preferred lists resources whose preferred encoding version changed, as
	// "group/name: old → new".
	Preferred []string `json:"preferred"`
	// Changed lists the other kept resources whose declaration changed (versions
	// served, declared, conversions).
	Changed []string `json:"changed"`
}

// ApplySchema replaces the node's schema at run time (keel schema apply, SIGHUP), or
// refuses with ErrSchemaChange and changes nothing. The new schema is checked against
// what is stored at the current revision (exact counts, untagged objects included):
//
//	a resource removed that has stored objects   refused unless force (its objects
//	                                             would be unserved, and writable
//	                                             through the KV API again)
//	a kept resource whose prefix changed          refused (its objects would be lost
//	                                             to it)
//	a resource that does not declare a version    refused (the node could not read
//	some stored object uses                       them: it would turn unready)
//
// Accepted, it takes effect at once: kept resources keep their registration and
// re-register on the next round (a new preferred version is written as soon as every
// member decodes it, as at start); a new resource is registered, then served only once
// every alive member has registered it (until then its requests get 503, as writes to
// an unregistered resource); a removed one is no longer served, and the leader's GC
// removes this node's entry. Safe for concurrent use; concurrent calls apply in turn.
func (m *Manager) ApplySchema(ctx context.Context, s *Schema, force bool) (*SchemaChange, error) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	old := m.Schema()
	ch := diffSchemas(old, s)
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return ch, fmt.Errorf("versions: apply schema: read the store: %w", err)
	}
	for _, key := range ch.Removed {
		ss, err := LiveStorageState(view, key, old.LookupKey(key))
		if err != nil {
			return ch, err
		}
		if n := sumCounts(ss.ObjectCounts); n > 0 && !force {
			return ch, fmt.Errorf("%w: %s removes resource %s, which has %d stored object(s) under %q: "+
				"this node would stop serving them and the KV API could write under its prefix again; "+
				"delete them first, or apply with force", ErrSchemaChange, s.File, key, n, old.LookupKey(key).Prefix)
		}
	}
	for _, r := range s.Resources {
		o := old.LookupKey(r.Key())
		if o != nil && o.Prefix != r.Prefix {
			return ch, fmt.Errorf("%w: %s changes the prefix of %s from %q to %q: stored objects do not move; "+
				"declare a new resource and migrate instead", ErrSchemaChange, s.File, r.Key(), o.Prefix, r.Prefix)
		}
		ss, err := LiveStorageState(view, r.Key(), r)
		if err != nil {
			return ch, err
		}
		for _, v := range slices.Sorted(maps.Keys(ss.ObjectCounts)) {
			if n := ss.ObjectCounts[v]; n > 0 && v != VersionUnknown && !r.HasVersion(v) {
				return ch, fmt.Errorf("%w: %s does not declare version %s of %s, which %d stored object(s) use: "+
					"this node could not read them; declare it, or migrate them to a declared version first",
					ErrSchemaChange, s.File, v, r.Key(), n)
			}
		}
	}
	m.mu.Lock()
	res := make(map[string]*resourceState, len(s.Resources))
	for _, r := range s.Resources {
		if st, ok := m.mu.res[r.Key()]; ok {
			res[r.Key()] = st
		} else {
			res[r.Key()] = &resourceState{gated: true}
		}
	}
	m.mu.res = res
	m.schema.Store(s)
	m.mu.Unlock()
	m.log.Info("schema applied", "file", s.File, "added", ch.Added, "removed", ch.Removed,
		"preferred", ch.Preferred, "changed", ch.Changed)
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return ch, nil
}

// diffSchemas lists what going from old to s changes.
func diffSchemas(old, s *Schema) *SchemaChange {
	ch := &SchemaChange{File: s.File, Added: []string{}, Removed: []string{}, Preferred: []string{}, Changed: []string{}}
	for _, r := range s.Resources {
		o := old.LookupKey(r.Key())
		switch {
		case o == nil:
			ch.Added = append(ch.Added, r.Key())
		case o.Preferred != r.Preferred:
			ch.Preferred = append(ch.Preferred, fmt.Sprintf("%s: %s → %s", r.Key(), o.Preferred, r.Preferred))
		case !sameDeclaration(o, r):
			ch.Changed = append(ch.Changed, r.Key())
		}
	}
	for _, o := range old.Resources {
		if s.LookupKey(o.Key()) == nil {
			ch.Removed = append(ch.Removed, o.Key())
		}
	}
	return ch
}

// sameDeclaration compares two declarations of one resource, ignoring line numbers.
func sameDeclaration(a, b *Resource) bool {
	if a.Prefix != b.Prefix || !slices.Equal(a.Versions, b.Versions) || len(a.Conversions) != len(b.Conversions) {
		return false
	}
	for i, c := range a.Conversions {
		d := b.Conversions[i]
		if c.From != d.From || c.To != d.To || len(c.Ops) != len(d.Ops) {
			return false
		}
		for j, op := range c.Ops {
			o := d.Ops[j]
			if op.Kind != o.Kind || op.From != o.From || op.To != o.To || op.Field != o.Field || op.Lossy != o.Lossy ||
				fmt.Sprint(op.Value) != fmt.Sprint(o.Value) {
				return false
			}
		}
	}
	return true
}
