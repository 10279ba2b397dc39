package versions

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// VersionUnknown stands in persistedEncodingVersions for objects whose version nobody
// can tell (an object without encoding tag whose apiVersion does not parse).
const VersionUnknown = "Unknown"

// StorageState is the replicated record, one per resource, of the encodings stored
// objects use (the storage-version-migration KEP). The leader rewrites it every
// HeartbeatInterval.
//
// keel knows the persisted set exactly rather than accumulating it: the state machine
// counts live objects per encoding tag as writes apply (fsm View.Encodings), and the
// heartbeat adds objects written without a tag (data that predates the resource, or a
// restored old backup) by reading their apiVersion in a scan of the prefix. So a
// version leaves PersistedEncodingVersions as soon as no stored object uses it, which
// is when it is safe to drop from the schema.
type StorageState struct {
	Resource string `json:"resource"`
	// PersistedEncodingVersions lists every version some stored object is encoded in,
	// plus CurrentEncodingVersion (objects may be written in it any moment).
	PersistedEncodingVersions []string `json:"persistedEncodingVersions"`
	CurrentEncodingVersion    string   `json:"currentEncodingVersion,omitempty"`
	// ObjectCounts counts stored objects per version at ObservedRevision.
	ObjectCounts     map[string]int64 `json:"objectCounts"`
	ObservedRevision int64            `json:"observedRevision"`
	LastHeartbeat    time.Time        `json:"lastHeartbeat"`
	Revision         int64            `json:"revision,omitempty"` // set on read
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
		ObservedRevision: view.Revision()}
	set := slices.Collect(maps.Keys(counts))
	if common != "" && !slices.Contains(set, common) {
		set = append(set, common)
	}
	slices.SortFunc(set, func(a, b string) int { return compareVersions(r, a, b) })
	ss.PersistedEncodingVersions = set
	if len(set) == 0 {
		ss.PersistedEncodingVersions = []string{}
	}
	return ss, nil
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

// maybeHeartbeat rewrites every StorageState when HeartbeatInterval has passed.
func (m *Manager) maybeHeartbeat(ctx context.Context) {
	m.mu.Lock()
	due := time.Since(m.mu.lastHeartbeat) >= m.cfg.HeartbeatInterval
	m.mu.Unlock()
	if !due {
		return
	}
	if err := m.Heartbeat(ctx); err != nil {
		m.log.Warn("storage state heartbeat", "error", err)
		return
	}
	m.mu.Lock()
	m.mu.lastHeartbeat = time.Now()
	m.mu.Unlock()
}

// Heartbeat recomputes and stores the StorageState of every resource now (the loop
// does it every HeartbeatInterval on the leader).
func (m *Manager) Heartbeat(ctx context.Context) error {
	for _, r := range m.cfg.Schema.Resources {
		if err := m.heartbeat(ctx, r); err != nil {
			return fmt.Errorf("resource %s: %w", r.Key(), err)
		}
	}
	return nil
}

func (m *Manager) heartbeat(ctx context.Context, r *Resource) error {
	// One linearizable view for the agreement, the objects and the record replaced.
	view, err := m.cfg.Store.View(ctx, raft.Linearizable)
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
		return fmt.Errorf("storage state of %s changed concurrently", r.Key())
	}
	return nil
}
