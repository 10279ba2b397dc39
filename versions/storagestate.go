package versions

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// VersionUnknown stands in persistedEncodingVersions for objects whose version nobody
// can tell (an object without encoding tag whose apiVersion does not parse).
const VersionUnknown = "Unknown"

// StorageState is the replicated record, one per resource, of the encodings stored
// objects use (the storage-version-migration KEP). Every node whose schema has the
// resource keeps it fresh: the leader rewrites it every HeartbeatInterval, any other
// node once it is 2×HeartbeatInterval old (a leader without the resource, or without
// a schema, no longer stops it for the whole cluster). Readers of this release do not
// trust its age: they compute the same state at the current revision (LiveStorageState);
// the record stays for nodes of older releases, and for the prefix of a resource the
// answering node's schema lacks.
//
// keel knows the persisted set exactly rather than accumulating it: the state machine
// counts live objects per encoding tag as writes apply (fsm View.Encodings), and the
// heartbeat adds objects written without a tag (data that predates the resource, or a
// restored old backup) by reading their apiVersion in a scan of the prefix. So a
// version leaves PersistedEncodingVersions as soon as no stored object uses it, which
// is when it is safe to drop from the schema.
type StorageState struct {
	Resource string `json:"resource"`
	// PersistedStorageVersionHashes are the KEP's: the storage version hash (the one
	// the discovery document serves, StorageVersionHash) of every version some stored
	// object is encoded in, plus CurrentStorageVersionHash; VersionUnknown stays
	// "Unknown". PersistedEncodingVersions names the same versions in the same order,
	// for people. Records of releases before the hashes have the names only; they are
	// read with the hashes filled in (storageStateAt) and rewritten with them at the
	// next heartbeat.
	PersistedStorageVersionHashes []string `json:"persistedStorageVersionHashes"`
	CurrentStorageVersionHash     string   `json:"currentStorageVersionHash,omitempty"`
	// PersistedEncodingVersions lists every version some stored object is encoded in,
	// plus CurrentEncodingVersion (objects may be written in it any moment).
	PersistedEncodingVersions []string `json:"persistedEncodingVersions"`
	CurrentEncodingVersion    string   `json:"currentEncodingVersion,omitempty"`
	// ObjectCounts counts stored objects per version at ObservedRevision.
	ObjectCounts     map[string]int64 `json:"objectCounts"`
	ObservedRevision int64            `json:"observedRevision"`
	LastHeartbeat    time.Time        `json:"lastHeartbeat"`
	// Group and Prefix say where the resource's objects are, so that a node whose
	// schema lacks the resource can still count them (empty in records of older
	// releases).
	Group    string `json:"group,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Revision int64  `json:"revision,omitempty"` // set on read
	// Exact is set by readers (never stored): the counts were computed at
	// ObservedRevision, the view's current one, not read from the record;
	// LastHeartbeat and Revision still describe the record.
	Exact bool `json:"exact,omitempty"`
}

// TagCounts returns the count of objects per version of resource from the state
// machine's live encoding-tag counts (objects written without a tag are not in it; see
// ComputeStorageState). O(tags), not O(objects).
func TagCounts(view *fsm.View, resource string) map[string]int64 {
	out := make(map[string]int64)
	prefix := resource + "/"
	for tag, n := range view.Encodings() {
		if v, ok := strings.CutPrefix(tag, prefix); ok && !strings.Contains(v, "/") {
			out[v] += n
		}
	}
	return out
}

// ComputeStorageState derives r's StorageState from view: exact tag counts plus a scan
// of r's prefix for untagged objects (O(objects under the prefix)).
func ComputeStorageState(view *fsm.View, r *Resource, common string) (*StorageState, error) {
	counts := TagCounts(view, r.Key())
	prefix := []byte(r.Prefix)
	start, end := prefix, fsm.PrefixEnd(prefix)
	for {
		kvs, next, err := view.Range(start, end, view.Revision(), 1000)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			if kv.Encoding == "" {
				counts[r.StoredVersion(kv)]++
			}
		}
		if next == nil {
			break
		}
		start = next
	}
	ss := &StorageState{Resource: r.Key(), CurrentEncodingVersion: common, ObjectCounts: counts,
		ObservedRevision: view.Revision(), Group: r.Group, Prefix: r.Prefix}
	set := slices.Collect(maps.Keys(counts))
	if common != "" && !slices.Contains(set, common) {
		set = append(set, common)
	}
	slices.SortFunc(set, func(a, b string) int { return compareVersions(r, a, b) })
	ss.PersistedEncodingVersions = set
	if len(set) == 0 {
		ss.PersistedEncodingVersions = []string{}
	}
	ss.fillHashes()
	return ss, nil
}

// StorageVersionHash is the storage version hash of resource "group/name" stored in
// version v, as the discovery document (GET /apis) serves it: the first 8 bytes of the
// SHA-256 of the encoding tag, in base64. VersionUnknown hashes to itself, as in the
// KEP.
func StorageVersionHash(resource, v string) string {
	if v == VersionUnknown || v == "" {
		return v
	}
	sum := sha256.Sum256([]byte(EncodingTag(resource, v)))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// fillHashes sets the hashes from the version names (a computed state, or a record of
// a release that stored names only).
func (ss *StorageState) fillHashes() {
	ss.PersistedStorageVersionHashes = make([]string, 0, len(ss.PersistedEncodingVersions))
	for _, v := range ss.PersistedEncodingVersions {
		ss.PersistedStorageVersionHashes = append(ss.PersistedStorageVersionHashes, StorageVersionHash(ss.Resource, v))
	}
	ss.CurrentStorageVersionHash = StorageVersionHash(ss.Resource, ss.CurrentEncodingVersion)
}

// VersionOfHash names the version whose hash is h among the persisted ones ("" when
// none is).
func (ss *StorageState) VersionOfHash(h string) string {
	for i, x := range ss.PersistedStorageVersionHashes {
		if x == h && i < len(ss.PersistedEncodingVersions) {
			return ss.PersistedEncodingVersions[i]
		}
	}
	return ""
}

// StaleHashes lists the persisted hashes other than the current one, as "HASH
// (group/version)": what a migration has to rewrite. Empty when every stored object
// is in the current version (the KEP's trigger does not fire).
func (ss *StorageState) StaleHashes() []string {
	group, _, _ := strings.Cut(ss.Resource, "/")
	var out []string
	for i, h := range ss.PersistedStorageVersionHashes {
		if h == ss.CurrentStorageVersionHash || i >= len(ss.PersistedEncodingVersions) {
			continue
		}
		if v := ss.PersistedEncodingVersions[i]; v != VersionUnknown && ss.ObjectCounts != nil && ss.ObjectCounts[v] == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s/%s)", h, group, ss.PersistedEncodingVersions[i]))
	}
	return out
}

// compareVersions orders versions as r declares them, undeclared ones after, by name.
func compareVersions(r *Resource, a, b string) int {
	ia, ib := slices.Index(r.Decodable(), a), slices.Index(r.Decodable(), b)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	}
	return strings.Compare(a, b)
}

// LiveStorageState is resource's StorageState at view's revision, exact: the state
// machine's tag counts plus a scan of the prefix for untagged objects. r is the
// resource as the caller's schema declares it, or nil: then the group and prefix come
// from the stored record. Without either (a record of an older release, or none) the
// stored record comes back as it is, Exact false. The record's LastHeartbeat and
// Revision are kept for display.
func LiveStorageState(view *fsm.View, resource string, r *Resource) (*StorageState, error) {
	rec, err := storageStateAt(view, resource)
	if err != nil {
		return nil, err
	}
	if r == nil && rec.Prefix != "" && rec.Group != "" {
		group, name, _ := strings.Cut(resource, "/")
		if group == rec.Group {
			r = &Resource{Group: group, Name: name, Prefix: rec.Prefix}
		}
	}
	if r == nil {
		return rec, nil
	}
	sv, err := storageVersionAt(view, resource)
	if err != nil {
		return nil, err
	}
	ss, err := ComputeStorageState(view, r, sv.CommonEncodingVersion)
	if err != nil {
		return nil, err
	}
	ss.LastHeartbeat, ss.Revision, ss.Exact = rec.LastHeartbeat, rec.Revision, true
	return ss, nil
}

// maybeHeartbeat rewrites the StorageState of every resource of the schema whose
// record is due: HeartbeatInterval old on the leader, twice that elsewhere (the
// leader may lack the resource). Several nodes may find a record due at once; the
// compare-and-swap lets one win and the others skip quietly.
func (m *Manager) maybeHeartbeat(ctx context.Context, leader bool) {
	due := m.cfg.HeartbeatInterval
	if !leader {
		due *= 2
	}
	view, err := m.cfg.Store.View(ctx, fsm.Serializable)
	if err != nil {
		return
	}
	for _, r := range m.Schema().Resources {
		ss, err := storageStateAt(view, r.Key())
		if err != nil || time.Since(ss.LastHeartbeat) < due {
			continue
		}
		if err := m.heartbeat(ctx, r); err != nil && !errors.Is(err, errConcurrentHeartbeat) && ctx.Err() == nil {
			m.log.Warn("storage state heartbeat", "resource", r.Key(), "error", err)
		}
	}
}

// errConcurrentHeartbeat: another node rewrote the record first (not a failure).
var errConcurrentHeartbeat = errors.New("versions: storage state changed concurrently")

// Heartbeat recomputes and stores the StorageState of every resource now (the
// migrator's leader does it when a migration finishes).
func (m *Manager) Heartbeat(ctx context.Context) error {
	for _, r := range m.Schema().Resources {
		if err := m.heartbeat(ctx, r); err != nil {
			return fmt.Errorf("resource %s: %w", r.Key(), err)
		}
	}
	return nil
}
func (m *Manager) heartbeat(ctx context.Context, r *Resource) error {
	// One linearizable view for the agreement, the objects and the record replaced.
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return err
	}
	sv, err := storageVersionAt(view, r.Key())
	if err != nil {
		return err
	}
	old, err := storageStateAt(view, r.Key())
	if err != nil {
		return err
	}
	ss, err := ComputeStorageState(view, r, sv.CommonEncodingVersion)
	if err != nil {
		return err
	}
	ss.LastHeartbeat = time.Now().UTC().Truncate(time.Millisecond)
	b, _ := json.Marshal(ss)
	ok, err := m.cas(ctx, StorageStateKey(r.Key()), old.Revision, b)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", errConcurrentHeartbeat, r.Key())
	}
	return nil
}
