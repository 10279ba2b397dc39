package agent

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/keel-kv/keel/fsm"
)

// A saved snapshot file (what GET /v1/agent/snapshot answers and POST takes back):
//
//	"KEELSAVE" format:byte(1)
//	the state machine's snapshot stream (fsm format; the cluster secret left out)
//	mac:32 bytes = HMAC-SHA256(key, everything before)
//
// key = HKDF-SHA256(cluster secret, info "keel saved snapshot v1"): only the cluster
// can make or check the MAC, and the file does not hold the secret, so its holder can
// neither act as the cluster nor change the file unseen (a changed record with a fixed
// CRC is refused). A file written before the MAC (it starts with the fsm stream's own
// "KEELSNAP") or by another cluster cannot be checked here: it is refused unless the
// restore is forced (-force-foreign), which a management token alone may ask for.
const (
	savedMagic   = "KEELSAVE"
	savedFormat  = byte(1)
	savedHead    = len(savedMagic) + 1
	savedMACSize = sha256.Size
	savedMACInfo = "keel saved snapshot v1"
	fsmMagic     = "KEELSNAP"
)

// errUnverifiedSnapshot: a restore of a file whose MAC this cluster cannot check (or
// that does not match), refused without force.
var errUnverifiedSnapshot = errors.New("agent: unverified snapshot")

// errNoClusterSecret: the cluster has no secret yet, so it cannot make a MAC.
var errNoClusterSecret = errors.New("agent: the cluster has no secret yet (is it still starting?)")

// snapshotMAC returns a new HMAC keyed by the cluster secret for saved files.
func (a *Agent) snapshotMAC() (hash.Hash, error) {
	_, secret, ok := a.store.ClusterMeta()
	if !ok {
		return nil, errNoClusterSecret
	}
	key, err := hkdf.Key(sha256.New, secret, nil, savedMACInfo, sha256.Size)
	if err != nil {
		return nil, err
	}
	return hmac.New(sha256.New, key), nil
}

// savedStream checks the saved file f (size bytes; maybe in its etcd envelope,
// snapshot_etcd.go) and returns the fsm stream it holds. Without force a file is
// accepted only if its MAC verifies with this cluster's key; otherwise the error says
// why (damaged, another cluster's, altered, no MAC) and nothing changes. With force
// the MAC is not checked.
func (a *Agent) savedStream(f io.ReaderAt, size int64, force bool) (io.Reader, error) {
	if inner, ok, err := unwrapEtcdEnvelope(f, size); err != nil {
		return nil, err
	} else if ok {
		f, size = inner, inner.Size()
	}
	head := make([]byte, savedHead)
	if _, err := f.ReadAt(head, 0); err != nil || string(head[:len(savedMagic)]) != savedMagic {
		if err == nil && string(head[:len(fsmMagic)]) == fsmMagic && !force {
			return nil, fmt.Errorf("%w: the file carries no MAC (saved by a keel release before saved snapshots were "+
				"authenticated), so this cluster cannot tell whether it was altered; refused, nothing changed "+
				"(if you trust the file: keel snapshot restore -force-foreign)", errUnverifiedSnapshot)
		}
		return io.NewSectionReader(f, 0, size), nil // the fsm stream says what it is (or is not)
	}
	if head[len(savedMagic)] != savedFormat {
		return nil, fmt.Errorf("%w: saved snapshot format %d (this build reads %d)", fsm.ErrUnknownFormat,
			head[len(savedMagic)], savedFormat)
	}
	if size < int64(savedHead+savedMACSize) {
		return nil, fmt.Errorf("%w: saved snapshot: truncated", fsm.ErrCorrupt)
	}
	inner := io.NewSectionReader(f, int64(savedHead), size-int64(savedHead+savedMACSize))
	if force {
		return inner, nil
	}
	mac, err := a.snapshotMAC()
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(mac, io.NewSectionReader(f, 0, size-savedMACSize)); err != nil {
		return nil, err
	}
	sum := make([]byte, savedMACSize)
	if _, err := f.ReadAt(sum, size-savedMACSize); err != nil {
		return nil, err
	}
	if hmac.Equal(mac.Sum(nil), sum) {
		return inner, nil
	}
	return nil, a.whyUnverified(inner)
}

// whyUnverified explains a MAC that does not match: a damaged file, another cluster's
// file, or one altered after it was saved.
func (a *Agent) whyUnverified(inner *io.SectionReader) error {
	check := fsm.NewStore()
	if err := check.Restore(inner); errors.Is(err, fsm.ErrNotSnapshot) {
		return fmt.Errorf("%w: saved snapshot: truncated or overwritten", fsm.ErrCorrupt) // its head says it is one
	} else if err != nil {
		return err
	}
	id, _, _ := check.ClusterMeta()
	if err := a.acceptSnapshotCluster(id, false); err != nil {
		return err
	}
	return fmt.Errorf("%w: the snapshot file is damaged or was altered after it was saved: its MAC does not "+
		"verify with this cluster's key; refused, nothing changed", errUnverifiedSnapshot)
}
