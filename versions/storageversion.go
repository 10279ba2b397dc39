package versions

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Errors of storage-version agreement. Match them with errors.Is.
var (
	// ErrNotRegistered: this node has not yet registered its storage versions for the
	// resource; writes to it wait (KEP-2339's request filter).
	ErrNotRegistered = errors.New("versions: wait for storage version registration to complete")
	// ErrNoCommonEncoding: no version is decodable by every live member, so nothing may
	// be written.
	ErrNoCommonEncoding = errors.New("versions: no encoding version every member can decode")
	// ErrUndecodable: stored objects use a version this node's schema cannot decode.
	ErrUndecodable = errors.New("versions: stored objects use a version this node cannot decode")
	// ErrInvalidEntry: a StorageVersion entry breaks encodingVersion ∈ decodableVersions ⊇
	// servedVersions.
	ErrInvalidEntry = errors.New("versions: invalid storage version entry")
	// ErrSchemaChange: a schema applied at run time would strand stored objects
	// (removes a resource that has some, changes a prefix, drops a stored version);
	// nothing was changed.
	ErrSchemaChange = errors.New("versions: schema change refused")
)

// Keys of the replicated objects keel keeps about resources. They live under
// SystemPrefix, which the KV API refuses to write.
const (
	SystemPrefix       = "\x00keel/"
	storageVersionsKey = SystemPrefix + "storageversions/"
	storageStatesKey   = SystemPrefix + "storagestates/"
)

// StorageVersionKey is the key of the StorageVersion object of resource "group/name".
func StorageVersionKey(resource string) string { return storageVersionsKey + resource }

// StorageStateKey is the key of the StorageState object of resource "group/name".
func StorageStateKey(resource string) string { return storageStatesKey + resource }

// EncodingTag is the fsm encoding tag of objects of resource "group/name" stored in
// version v: "group/name/v". The state machine counts live keys per tag.
func EncodingTag(resource, v string) string { return resource + "/" + v }

// ConditionAllEncodingVersionsEqual is the condition type of KEP-2339.
const ConditionAllEncodingVersionsEqual = "AllEncodingVersionsEqual"

// StorageVersion is the replicated record, one per resource, of which encodings each
// node reads and writes (KEP-2339). Every update is a compare-and-swap on Revision.
type StorageVersion struct {
	Resource        string                 `json:"resource"` // "group/name"
	StorageVersions []ServerStorageVersion `json:"storageVersions"`
	// CommonEncodingVersion is set when every entry has the same EncodingVersion.
	CommonEncodingVersion string      `json:"commonEncodingVersion,omitempty"`
	Conditions            []Condition `json:"conditions,omitempty"`
	// Revision is the object's mod revision in the store; set on read, never stored.
	Revision int64 `json:"revision,omitempty"`
}

// ServerStorageVersion is one node's entry.
type ServerStorageVersion struct {
	NodeID string `json:"nodeID"`
	// Incarnation tells a restarted node apart from its previous life (gossip's). It
	// is a random 64-bit number, above 2^53, so JavaScript's JSON.parse rounds it:
	// treat it as opaque. It is written as a JSON number (every release reads that)
	// and read as a number or a string, so that a later release can write a string.
	Incarnation uint64 `json:"incarnation"`
	// EncodingVersion is the node's preferred encoding (its schema's preferredVersion).
	EncodingVersion string `json:"encodingVersion"`
	// EffectiveEncodingVersion is what the node writes now: EncodingVersion once every
	// live member decodes it, an older version before; "" while it refuses writes.
	EffectiveEncodingVersion string   `json:"effectiveEncodingVersion,omitempty"`
	DecodableVersions        []string `json:"decodableVersions"`
	ServedVersions           []string `json:"servedVersions"`
}

// UnmarshalJSON reads the entry with its incarnation as a JSON number or a string.
func (s *ServerStorageVersion) UnmarshalJSON(b []byte) error {
	type plain ServerStorageVersion
	var v struct {
		plain
		Incarnation json.RawMessage `json:"incarnation"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = ServerStorageVersion(v.plain)
	raw := strings.Trim(string(v.Incarnation), `"`)
	if raw == "" || raw == "null" {
		return nil
	}
	n, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		return fmt.Errorf("incarnation %s: not an unsigned 64-bit number", v.Incarnation)
	}
	s.Incarnation = n
	return nil
}

// Condition is a Kubernetes-style condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // "True", "False"
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// Validate checks encodingVersion ∈ decodableVersions ⊇ servedVersions (and that the
// effective version is decodable).
func (e ServerStorageVersion) Validate() error {
	if e.NodeID == "" {
		return fmt.Errorf("%w: empty node ID", ErrInvalidEntry)
	}
	if !slices.Contains(e.DecodableVersions, e.EncodingVersion) {
		return fmt.Errorf("%w: node %s: encoding version %q not among decodable versions %v",
			ErrInvalidEntry, e.NodeID, e.EncodingVersion, e.DecodableVersions)
	}
	if e.EffectiveEncodingVersion != "" && !slices.Contains(e.DecodableVersions, e.EffectiveEncodingVersion) {
		return fmt.Errorf("%w: node %s: effective encoding version %q not among decodable versions %v",
			ErrInvalidEntry, e.NodeID, e.EffectiveEncodingVersion, e.DecodableVersions)
	}
	for _, v := range e.ServedVersions {
		if !slices.Contains(e.DecodableVersions, v) {
			return fmt.Errorf("%w: node %s: served version %q not decodable %v",
				ErrInvalidEntry, e.NodeID, v, e.DecodableVersions)
		}
	}
	return nil
}

// Entry returns the entry of node id, if any.
func (sv *StorageVersion) Entry(id string) (ServerStorageVersion, bool) {
	for _, e := range sv.StorageVersions {
		if e.NodeID == id {
			return e, true
		}
	}
	return ServerStorageVersion{}, false
}

// Upsert replaces the entry of e.NodeID (or adds it), keeping entries sorted by node ID.
func (sv *StorageVersion) Upsert(e ServerStorageVersion) {
	sv.Remove(e.NodeID)
	sv.StorageVersions = append(sv.StorageVersions, e)
	slices.SortFunc(sv.StorageVersions, func(a, b ServerStorageVersion) int { return strings.Compare(a.NodeID, b.NodeID) })
}

// Remove drops the entry of node id and reports whether there was one.
func (sv *StorageVersion) Remove(id string) bool {
	n := len(sv.StorageVersions)
	sv.StorageVersions = slices.DeleteFunc(sv.StorageVersions, func(e ServerStorageVersion) bool { return e.NodeID == id })
	return len(sv.StorageVersions) != n
}

// Recompute sets CommonEncodingVersion and the AllEncodingVersionsEqual condition from
// the entries. The condition's LastTransitionTime moves to now when its status changes
// and also when the common version changes value (v1 → v2 with the status True both
// times is a transition a migrator must notice).
func (sv *StorageVersion) Recompute(now time.Time) {
	prevCommon := sv.CommonEncodingVersion
	common := ""
	equal := len(sv.StorageVersions) > 0
	for i, e := range sv.StorageVersions {
		if i == 0 {
			common = e.EncodingVersion
		} else if e.EncodingVersion != common {
			equal = false
		}
	}
	c := Condition{Type: ConditionAllEncodingVersionsEqual}
	switch {
	case len(sv.StorageVersions) == 0:
		common = ""
		c.Status, c.Reason, c.Message = "False", "NoEntries", "no node has registered"
	case equal:
		c.Status, c.Reason = "True", "CommonEncodingVersionSet"
		c.Message = fmt.Sprintf("all %d nodes encode in %s", len(sv.StorageVersions), common)
	default:
		common = ""
		c.Status, c.Reason = "False", "CommonEncodingVersionUnset"
		c.Message = "nodes prefer different encoding versions: " + sv.describeEncodings()
	}
	sv.CommonEncodingVersion = common
	prev := sv.condition(ConditionAllEncodingVersionsEqual)
	c.LastTransitionTime = now.UTC().Truncate(time.Second)
	if prev != nil && prev.Status == c.Status && prevCommon == common {
		c.LastTransitionTime = prev.LastTransitionTime
	}
	sv.Conditions = slices.DeleteFunc(sv.Conditions, func(x Condition) bool { return x.Type == c.Type })
	sv.Conditions = append(sv.Conditions, c)
}

func (sv *StorageVersion) describeEncodings() string {
	var parts []string
	for _, e := range sv.StorageVersions {
		parts = append(parts, e.NodeID+"="+e.EncodingVersion)
	}
	return strings.Join(parts, ", ")
}

func (sv *StorageVersion) condition(typ string) *Condition {
	for i := range sv.Conditions {
		if sv.Conditions[i].Type == typ {
			return &sv.Conditions[i]
		}
	}
	return nil
}

// Condition returns the condition of type typ, if set.
func (sv *StorageVersion) Condition(typ string) (Condition, bool) {
	if c := sv.condition(typ); c != nil {
		return *c, true
	}
	return Condition{}, false
}

// decodeStorageVersion decodes a stored object and checks every entry.
func decodeStorageVersion(b []byte, rev int64) (*StorageVersion, error) {
	var sv StorageVersion
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("decode storage version: %w", err)
	}
	for _, e := range sv.StorageVersions {
		if err := e.Validate(); err != nil {
			return nil, err
		}
	}
	sv.Revision = rev
	return &sv, nil
}

func (sv *StorageVersion) encode() []byte {
	c := *sv
	c.Revision = 0
	b, _ := json.Marshal(&c) // plain structs: cannot fail
	return b
}

// EffectiveEncoding picks the version a node of resource r writes when the other live
// members decode the given sets: its preferred version if every set holds it, else the
// newest version (in r's declared order) that r and every set can decode.
// ErrNoCommonEncoding when there is none.
func EffectiveEncoding(r *Resource, others [][]string) (string, error) {
	all := func(v string) bool {
		for _, set := range others {
			if !slices.Contains(set, v) {
				return false
			}
		}
		return true
	}
	if all(r.Preferred) {
		return r.Preferred, nil
	}
	decodable := r.Decodable()
	for i := len(decodable) - 1; i >= 0; i-- {
		if all(decodable[i]) {
			return decodable[i], nil
		}
	}
	return "", fmt.Errorf("%w: resource %s: this node decodes %v; members decode %v",
		ErrNoCommonEncoding, r.Key(), decodable, others)
}
