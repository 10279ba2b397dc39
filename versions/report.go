package versions

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
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
}

// BuildReport reads every StorageVersion and StorageState in the store from one
// linearizable view and adds m's local standing; m may be nil (a node without schema).
func BuildReport(ctx context.Context, store Store, m *Manager, nodeID string) (*Report, error) {
	view, err := store.View(ctx, raft.Linearizable)
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
		ss, err := storageStateAt(view, name)
		if err != nil {
			return nil, err
		}
		rr := ResourceReport{Resource: name, StorageVersion: sv, StorageState: ss}
		if m != nil && m.Schema().LookupKey(name) != nil {
			if enc, err := m.WriteEncoding(name); err != nil {
				rr.WritesBlocked = err.Error()
			} else {
				rr.WriteEncoding = enc
			}
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

// CheckUpgrade says whether a node running schema s can join the cluster described by
// rep now: for every resource, the node must decode every persisted version (or it
// would refuse to become ready), and some version must be decodable by it and every
// registered node (or its writes would be refused). A resource the cluster stores but
// s lacks is reported, not refused: the new node simply does not serve it.
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
			out = append(out, Finding{rr.Resource, true, "not in the new schema: the node will not serve it"})
		}
	}
	return out
}

func checkResource(r *Resource, rr ResourceReport) []Finding {
	var out []Finding
	ok := true
	if ss := rr.StorageState; ss != nil {
		for _, v := range ss.PersistedEncodingVersions {
			if v == VersionUnknown {
				out = append(out, Finding{r.Key(), false, "stored versions are not known yet (no StorageState heartbeat); retry shortly"})
				ok = false
				continue
			}
			if !r.HasVersion(v) {
				out = append(out, Finding{r.Key(), false, fmt.Sprintf(
					"%d stored object(s) use version %s, which the new schema cannot decode: migrate them to a version it decodes first",
					ss.ObjectCounts[v], v)})
				ok = false
			}
		}
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
		out = append(out, Finding{r.Key(), false, "no version both the new schema and every registered node decode: its writes would be refused"})
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
