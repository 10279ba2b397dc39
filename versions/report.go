package versions

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keel-kv/keel/fsm"
)

// Report is what `keel versions` shows: per resource, every node's registered entry,
// the agreement, and what is stored. It is the JSON of GET /v1/versions.
type Report struct {
	NodeID    string           `json:"nodeID"`
	Resources []ResourceReport `json:"resources"`
}

// ResourceReport is one resource of a Report.
type ResourceReport struct {
	Resource       string          `json:"resource"`
	StorageVersion *StorageVersion `json:"storageVersion"`
	StorageState   *StorageState   `json:"storageState"`
	// WriteEncoding is the version the answering node writes the resource in, or
	// WritesBlocked says why it refuses writes; both empty when the node's schema lacks
	// the resource.
	WriteEncoding string `json:"writeEncoding,omitempty"`
	WritesBlocked string `json:"writesBlocked,omitempty"`
	// HeldBack says which member keeps writes in an older version than the preferred
	// one, and what to do (Manager.HeldBack).
	HeldBack string `json:"heldBack,omitempty"`
	// StoredObjects counts the objects stored per version, exactly, at the report's
	// revision: the state machine's encoding-tag counts, plus objects written without
	// a tag when StorageState is Exact (the answering node, or the record, knows the
	// resource's prefix).
	StoredObjects map[string]int64 `json:"storedObjects,omitempty"`
}

// BuildReport reads every StorageVersion in the store from one linearizable view,
// computes every resource's StorageState at that view's revision (LiveStorageState:
// exact right after a write, whoever leads), and adds m's local standing; m may be nil
// (a node without schema).
func BuildReport(ctx context.Context, store Store, m *Manager, nodeID string) (*Report, error) {
	view, err := store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, p := range []string{storageVersionsKey, storageStatesKey} {
		kvs, _, err := view.Range([]byte(p), fsm.PrefixEnd([]byte(p)), 0, 0)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			names[strings.TrimPrefix(string(kv.Key), p)] = true
		}
	}
	if m != nil {
		for _, r := range m.Schema().Resources {
			names[r.Key()] = true
		}
	}
	rep := &Report{NodeID: nodeID, Resources: []ResourceReport{}}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		sv, err := storageVersionAt(view, name)
		if err != nil {
			return nil, err
		}
		var r *Resource
		if m != nil {
			r = m.Schema().LookupKey(name)
		}
		ss, err := LiveStorageState(view, name, r)
		if err != nil {
			return nil, err
		}
		rr := ResourceReport{Resource: name, StorageVersion: sv, StorageState: ss, StoredObjects: TagCounts(view, name)}
		if ss.Exact {
			rr.StoredObjects = maps.Clone(ss.ObjectCounts)
		}
		if m != nil && m.Schema().LookupKey(name) != nil {
			if enc, err := m.WriteEncoding(name); err != nil {
				rr.WritesBlocked = err.Error()
			} else {
				rr.WriteEncoding = enc
			}
			rr.HeldBack = m.HeldBack(name)
		}
		rep.Resources = append(rep.Resources, rr)
	}
	return rep, nil
}

// Finding is one conclusion of CheckUpgrade.
type Finding struct {
	Resource string `json:"resource"`
	OK       bool   `json:"ok"`
	Message  string `json:"message"`
}

// CheckUpgrade says whether a node running schema s — a newer release's, or an older
// one's for a downgrade — can join the cluster described by rep now: for every
// resource, the node must decode every version stored objects use (or it would refuse
// to become ready), and some version must be decodable by it and every registered
// node (or its writes would be refused). Stored versions are the exact per-version
// counts at the report's revision plus the StorageState heartbeat's (objects without
// an encoding tag). A resource the cluster stores but s lacks is reported, not
// refused: the node simply does not serve it.
func CheckUpgrade(s *Schema, rep *Report) []Finding {
	var out []Finding
	byName := map[string]ResourceReport{}
	for _, rr := range rep.Resources {
		byName[rr.Resource] = rr
	}
	for _, r := range s.Resources {
		rr, ok := byName[r.Key()]
		if !ok {
			out = append(out, Finding{r.Key(), true, "new resource: nothing stored yet"})
			continue
		}
		out = append(out, checkResource(r, rr)...)
	}
	for _, rr := range rep.Resources {
		if s.LookupKey(rr.Resource) == nil {
			msg := "not in this schema: the node will not serve it"
			if n := sumCounts(storedVersions(rr)); n > 0 {
				msg = fmt.Sprintf("not in this schema: the node will not serve it (%d stored object(s))", n)
			}
			out = append(out, Finding{rr.Resource, true, msg})
		}
	}
	return out
}

// storedVersions is what is stored per version: the exact counts when the report has
// them (StorageState.Exact). From a node of an older release it merges the tag counts
// with the heartbeat's, taking the larger per version: the heartbeat adds untagged
// objects, the tags are newer (a heartbeat older than a migration may name a version
// no longer stored: the check then errs on the safe side until the next heartbeat).
func storedVersions(rr ResourceReport) map[string]int64 {
	out := map[string]int64{}
	for v, n := range rr.StoredObjects {
		if n > 0 && v != VersionUnknown {
			out[v] = n
		}
	}
	if ss := rr.StorageState; ss != nil && !ss.Exact {
		for _, v := range ss.PersistedEncodingVersions {
			if n := ss.ObjectCounts[v]; v != VersionUnknown && n > 0 {
				out[v] = max(out[v], n)
			}
		}
	}
	return out
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, c := range m {
		n += c
	}
	return n
}

func checkResource(r *Resource, rr ResourceReport) []Finding {
	var out []Finding
	ok := true
	switch ss := rr.StorageState; {
	case ss == nil:
	case ss.Exact && ss.ObjectCounts[VersionUnknown] > 0:
		out = append(out, Finding{r.Key(), false, fmt.Sprintf(
			"%d stored object(s) have neither an encoding tag nor an apiVersion of group %s: fix or delete them",
			ss.ObjectCounts[VersionUnknown], r.Group)})
		ok = false
	case !ss.Exact && slices.Contains(ss.PersistedEncodingVersions, VersionUnknown):
		out = append(out, Finding{r.Key(), false, "objects stored without an encoding tag are not counted yet: the " +
			"answering node's schema lacks the resource and no node serving it has written its StorageState; " +
			"ask a node that serves it (-addr), or retry shortly"})
		ok = false
	}
	stored := storedVersions(rr)
	for _, v := range slices.Sorted(maps.Keys(stored)) {
		if !r.HasVersion(v) {
			out = append(out, Finding{r.Key(), false, fmt.Sprintf(
				"%d stored object(s) use version %s, which this schema cannot decode: migrate them to a version it decodes first",
				stored[v], v)})
			ok = false
		}
	}
	if ss := rr.StorageState; ss != nil && ss.CurrentEncodingVersion != "" && stored[ss.CurrentEncodingVersion] == 0 &&
		!r.HasVersion(ss.CurrentEncodingVersion) {
		out = append(out, Finding{r.Key(), false, fmt.Sprintf(
			"the cluster writes version %s now, which this schema cannot decode: first make every node prefer a version "+
				"this schema decodes (a schema that still decodes %s), and let the migration finish", ss.CurrentEncodingVersion,
			ss.CurrentEncodingVersion)})
		ok = false
	}
	var others [][]string
	if rr.StorageVersion != nil {
		for _, e := range rr.StorageVersion.StorageVersions {
			others = append(others, e.DecodableVersions)
		}
	}
	enc, err := EffectiveEncoding(r, others)
	switch {
	case err != nil:
		out = append(out, Finding{r.Key(), false, "no version both this schema and every registered node decode: its writes would be refused"})
		ok = false
	case enc != r.Preferred:
		out = append(out, Finding{r.Key(), ok, fmt.Sprintf(
			"will write %s until every node decodes its preferred %s", enc, r.Preferred)})
	}
	if ok && len(out) == 0 {
		out = append(out, Finding{r.Key(), true, fmt.Sprintf("decodes every stored version; will write %s", enc)})
	}
	return out
}

// LookupKey returns the resource named "group/name", or nil.
func (s *Schema) LookupKey(key string) *Resource {
	group, name, ok := strings.Cut(key, "/")
	if !ok {
		return nil
	}
	return s.Lookup(group, name)
}

// StorageVersionAt reads the StorageVersion of resource from view; an absent one comes
// back empty with Revision 0. Callers that act on it in the same view (the migrator)
// use it instead of ReadStorageVersion.
func StorageVersionAt(view *fsm.View, resource string) (*StorageVersion, error) {
	return storageVersionAt(view, resource)
}
