package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/fsm/etcdsnap"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/versions"
)

// An etcd import reaches the agent as POST /v1/agent/snapshot?import=etcd with a
// bare state machine stream (no MAC: it was made from etcd's file by `keel snapshot
// restore`, which reads bbolt on the operator's machine, so a damaged etcd file never
// reaches the cluster's process). The agent reads the stream as any snapshot (every
// check of fsm), then checks every key against this node's own rules (limits, keel's
// reserved prefix, the schema's resource prefixes): what it cannot hold is listed and
// the import refused, unless skip_unholdable=true, which leaves those keys and leases
// out. It keeps the cluster's own records (versions.SystemPrefix: ACL, storage
// versions), written as created at the imported revision, which etcd's keys never
// share (the prefix is reserved), so the ACL of the cluster survives the import.

// maxListedUnholdable bounds the keys an error lists (the CLI lists them all first).
const maxListedUnholdable = 20

// importEtcd restores the import stream in f (size bytes).
func (a *Agent) importEtcd(ctx context.Context, f io.ReaderAt, size int64, skip bool) (etcdsnap.Summary, error) {
	check := fsm.NewStore()
	if err := check.Restore(io.NewSectionReader(f, 0, size)); err != nil {
		return etcdsnap.Summary{}, err
	}
	d := etcdsnap.FromView(check.View())
	o := etcdsnap.ImportOptions{Hold: a.server.CheckImportedKey, Carry: a.systemRecords()}
	if bad := d.Unholdable(o.Hold); len(bad) > 0 {
		if !skip {
			return etcdsnap.Summary{}, asKind(kv.ErrInvalidBody, unholdableError(bad))
		}
		o.Skip = bad
		a.log.Warn("etcd import: leaving out what this cluster cannot hold", "count", len(bad))
	}
	tmp, err := os.CreateTemp(a.cfg.DataDir, "import-*.snap")
	if err != nil {
		return etcdsnap.Summary{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	sum, err := d.WriteKeel(tmp, o)
	if err != nil {
		return sum, err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return sum, err
	}
	// The stream names no cluster: it replaces the data, never the identity.
	return sum, a.node.RestoreSnapshot(ctx, tmp, nil)
}

// systemRecords are the live keys under keel's own prefix.
func (a *Agent) systemRecords() []fsm.KeyValue {
	prefix := []byte(versions.SystemPrefix)
	var out []fsm.KeyValue
	a.store.View().Histories(func(h fsm.KeyHistory) bool {
		if bytes.HasPrefix(h.Key, prefix) && len(h.Versions) > 0 && h.Versions[0].CreateRevision != 0 {
			out = append(out, h.Versions[0])
		}
		return true
	})
	return out
}

// errUnholdable: an import holds keys or leases this cluster cannot hold.
var errUnholdable = errors.New("agent: the import holds keys this cluster cannot hold")

func unholdableError(bad []etcdsnap.Unholdable) error {
	var b strings.Builder
	for i, u := range bad {
		if i == maxListedUnholdable {
			fmt.Fprintf(&b, "; and %d more", len(bad)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(u.String())
	}
	return fmt.Errorf("%w: %d of them, nothing changed (keel snapshot restore --skip-unholdable leaves them out): %s",
		errUnholdable, len(bad), b.String())
}
