package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// maxSnapshotUpload bounds a restore upload.
const maxSnapshotUpload = 8 << 30

// handleSnapshotSave serves GET /v1/agent/snapshot: a saved snapshot file
// (snapshot_file.go) as a binary stream (application/octet-stream), reflecting every
// acknowledged write: the state machine's snapshot without the cluster secret, under
// a MAC only the cluster can make.
func (a *Agent) handleSnapshotSave(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	// Check the read barrier first so that an error can still be a JSON answer.
	if _, err := a.node.View(ctx, 0); err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	if _, err := a.snapshotMAC(); err != nil {
		a.httpd.WriteError(w, r, asKind(kv.ErrNotReady, err))
		return
	}
	w.Header().Set("Content-Type", api.ContentTypeSnapshot)
	if err := a.writeSaved(ctx, w); err != nil {
		a.log.Warn("snapshot save failed mid-stream", "error", err)
	}
}

// handleSnapshotRestore serves POST /v1/agent/snapshot: body = a snapshot saved by
// GET; replaces the whole cluster's data (never its ID and secret). It needs the
// management right (kv routeRules). It spools the body to a file in the data dir,
// checks its MAC (unless force_foreign) and its content completely, then restores
// (leader only).
func (a *Agent) handleSnapshotRestore(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	f, err := os.CreateTemp(a.cfg.DataDir, "restore-*.snap")
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, http.MaxBytesReader(w, r.Body, maxSnapshotUpload))
	if err != nil {
		a.httpd.WriteError(w, r, fmt.Errorf("reading the snapshot: %w", bodyError(err)))
		return
	}
	if r.URL.Query().Get("import") == "etcd" {
		sum, err := a.importEtcd(ctx, f, n, r.URL.Query().Get("skip_unholdable") == "true")
		if err != nil {
			a.httpd.WriteError(w, r, restoreError(err))
			return
		}
		writeAgentJSON(w, http.StatusOK, api.SnapshotRestoreResponse{Restored: strconv.FormatInt(n, 10) + " bytes",
			Import: &api.ImportSummary{Keys: sum.Keys, Versions: sum.Versions, Leases: sum.Leases, Revision: sum.Revision,
				CompactRevision: sum.Compact, SkippedKeys: sum.SkippedKeys, SkippedLeases: sum.SkippedLeases, KeptRecords: sum.Carried}})
		return
	}
	force := r.URL.Query().Get("force_foreign") == "true"
	stream, err := a.savedStream(f, n, force)
	if err == nil {
		err = a.node.RestoreSnapshot(ctx, stream, func(id string) error { return a.acceptSnapshotCluster(id, force) })
	}
	if err != nil {
		a.httpd.WriteError(w, r, restoreError(err))
		return
	}
	writeAgentJSON(w, http.StatusOK, api.SnapshotRestoreResponse{Restored: strconv.FormatInt(n, 10) + " bytes"})
}

// restoreError is a failed restore's error for kv's table: an upload that is no
// snapshot of this cluster a kv.ErrInvalidBody (400) saying why; replication errors
// stay raft's.
func restoreError(err error) error {
	switch {
	case errors.Is(err, errForeignSnapshot), errors.Is(err, errUnverifiedSnapshot):
		return asKind(kv.ErrInvalidBody, err)
	case errors.Is(err, fsm.ErrCorrupt):
		return asKind(kv.ErrInvalidBody, fmt.Errorf("the snapshot file is damaged (truncated, or a checksum or "+
			"length does not match); nothing changed: %w", err))
	case errors.Is(err, fsm.ErrNotSnapshot):
		return asKind(kv.ErrInvalidBody, fmt.Errorf("not a keel snapshot; nothing changed: %w", err))
	case errors.Is(err, fsm.ErrUnknownFormat):
		return asKind(kv.ErrInvalidBody, fmt.Errorf("the snapshot was written by a newer keel release; "+
			"nothing changed: %w", err))
	}
	return err
}

// errForeignSnapshot: a restore of another cluster's snapshot, refused without force.
var errForeignSnapshot = errors.New("agent: foreign snapshot")

// acceptSnapshotCluster refuses a snapshot of another cluster (or one that names no
// cluster) unless force: restoring it would replace this cluster's data with another's.
// A cluster that has no ID yet (never initialized) accepts any snapshot.
func (a *Agent) acceptSnapshotCluster(snapID string, force bool) error {
	ours, _, ok := a.store.ClusterMeta()
	if !ok || ours == "" || snapID == ours {
		return nil
	}
	if force {
		a.log.Warn("restoring a snapshot of another cluster (forced)", "snapshot_cluster", snapID, "cluster", ours)
		return nil
	}
	what := fmt.Sprintf("cluster %q", snapID)
	if snapID == "" {
		what = "no cluster"
	}
	return fmt.Errorf("%w: the snapshot belongs to %s, this is cluster %q: refused, nothing changed "+
		"(to replace this cluster's data with it anyway: keel snapshot restore -force-foreign)", errForeignSnapshot, what, ours)
}
