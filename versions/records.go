package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/keel-kv/keel/fsm"
)

// ReadStorageVersion reads the StorageVersion of resource from store (linearizable);
// an absent one comes back empty with Revision 0.
func ReadStorageVersion(ctx context.Context, store Store, resource string) (*StorageVersion, error) {
	view, err := store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	return storageVersionAt(view, resource)
}

// ReadStorageState reads the StorageState of resource (linearizable); an absent one
// comes back as the KEP's initial state, ["Unknown"].
func ReadStorageState(ctx context.Context, store Store, resource string) (*StorageState, error) {
	view, err := store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	return storageStateAt(view, resource)
}

// storageVersionAt reads the StorageVersion of resource from view.
func storageVersionAt(view *fsm.View, resource string) (*StorageVersion, error) {
	kv, found, err := recordAt(view, StorageVersionKey(resource))
	if err != nil {
		return nil, err
	}
	if !found {
		return &StorageVersion{Resource: resource}, nil
	}
	return decodeStorageVersion(kv.Value, kv.ModRevision)
}

// storageStateAt reads the StorageState of resource from view.
func storageStateAt(view *fsm.View, resource string) (*StorageState, error) {
	kv, found, err := recordAt(view, StorageStateKey(resource))
	if err != nil {
		return nil, err
	}
	if !found {
		return &StorageState{Resource: resource, PersistedEncodingVersions: []string{VersionUnknown},
			PersistedStorageVersionHashes: []string{VersionUnknown}}, nil
	}
	var ss StorageState
	if err := json.Unmarshal(kv.Value, &ss); err != nil {
		return nil, fmt.Errorf("decode storage state of %s: %w", resource, err)
	}
	if ss.Resource == "" {
		ss.Resource = resource
	}
	// A record of a release before the hashes names the versions only: read it with
	// the hashes the names give (the next heartbeat stores them).
	if len(ss.PersistedStorageVersionHashes) != len(ss.PersistedEncodingVersions) || ss.CurrentStorageVersionHash == "" {
		ss.fillHashes()
	}
	ss.Revision = kv.ModRevision
	return &ss, nil
}

// recordAt reads one of keel's records from view; found is false when absent.
func recordAt(view *fsm.View, key string) (kv fsm.KeyValue, found bool, err error) {
	kv, err = view.Get([]byte(key), 0)
	if errors.Is(err, fsm.ErrKeyNotFound) {
		return kv, false, nil
	}
	return kv, err == nil, err
}

// StoredVersion tells which version of r an object is stored in: its encoding tag,
// or for an object written without one its apiVersion ("group/version");
// VersionUnknown when neither says.
func (r *Resource) StoredVersion(kv fsm.KeyValue) string {
	if v, ok := strings.CutPrefix(kv.Encoding, r.Key()+"/"); ok && kv.Encoding != "" {
		return v
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
	}
	if json.Unmarshal(kv.Value, &obj) != nil {
		return VersionUnknown
	}
	g, v, ok := strings.Cut(obj.APIVersion, "/")
	if !ok || g != r.Group || v == "" {
		return VersionUnknown
	}
	return v
}
