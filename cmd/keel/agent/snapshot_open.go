package agent

import (
	"fmt"
	"io"

	"github.com/keel-kv/keel/fsm"
)

// SavedFile is a keel snapshot file opened offline (without the cluster's secret).
type SavedFile struct {
	// Stream is the state machine's snapshot stream inside the file.
	Stream *io.SectionReader
	// Envelope: the file is in its etcd envelope (saved by etcdctl from keel's etcd
	// door) and the envelope's sha256 matched.
	Envelope bool
	// MAC: the file carries a MAC (only the cluster that saved it can check it).
	MAC bool
}

// OpenSavedFile finds the state machine stream in a keel snapshot file f (size
// bytes): a saved file ("KEELSAVE", snapshot_file.go), in its etcd envelope or not, or
// a bare stream ("KEELSNAP"). It checks what can be checked without the cluster: the
// envelope's sha256 and the file's head; the stream's own checksum is fsm's to check
// (Store.Restore). The MAC is not checked: that needs the cluster's secret. Used by
// `keel snapshot inspect` and the etcd export, on a file or an answer already in hand.
func OpenSavedFile(f io.ReaderAt, size int64) (SavedFile, error) {
	var sf SavedFile
	if inner, ok, err := unwrapEtcdEnvelope(f, size); err != nil {
		return sf, err
	} else if ok {
		f, size, sf.Envelope = inner, inner.Size(), true
	}
	head := make([]byte, savedHead)
	if _, err := f.ReadAt(head, 0); err != nil {
		return sf, fmt.Errorf("%w: the file is too short to be a keel snapshot", fsm.ErrNotSnapshot)
	}
	switch {
	case string(head[:len(fsmMagic)]) == fsmMagic:
		sf.Stream = io.NewSectionReader(f, 0, size)
	case string(head[:len(savedMagic)]) != savedMagic:
		return sf, fmt.Errorf("%w: it starts with neither %q nor %q", fsm.ErrNotSnapshot, savedMagic, fsmMagic)
	case head[len(savedMagic)] != savedFormat:
		return sf, fmt.Errorf("%w: saved snapshot format %d (this build reads %d)", fsm.ErrUnknownFormat, head[len(savedMagic)], savedFormat)
	case size < int64(savedHead+savedMACSize):
		return sf, fmt.Errorf("%w: saved snapshot: truncated", fsm.ErrCorrupt)
	default:
		sf.MAC = true
		sf.Stream = io.NewSectionReader(f, int64(savedHead), size-int64(savedHead+savedMACSize))
	}
	return sf, nil
}
