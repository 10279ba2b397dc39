package fsm

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// KeyHistory is one key's whole history as the store keeps it: Versions newest first,
// each with ModRevision strictly below the one before. A delete is a version with
// CreateRevision 0 (a tombstone: ModRevision is the delete's revision; Value nil,
// Version, Encoding and Lease zero). It is how histories leave the store (View.Histories,
// for an export) and come in from another format (SnapshotWriter, for an import).
//
// Worked example: put a=1 @5, put a=2 @7, delete a @9, put a=3 @12 is, newest first,
//
//	{a=3 create 12 mod 12 ver 1} {tombstone mod 9} {a=2 create 5 mod 7 ver 2} {a=1 create 5 mod 5 ver 1}
//
// and after a compaction at 8 the store may still hold every version (it reclaims them
// in paced steps), but no read at a revision below 8 is served: a reader that wants
// only what etcd would keep drops every version older than the newest one at or below
// the compact revision, and that one too when it is a tombstone.
type KeyHistory struct {
	Key      []byte
	Versions []KeyValue
}

// Histories calls fn with every key's history, in key order, until it returns false.
// The histories alias the view's memory: read-only. Versions older than the compact
// revision that the store has not reclaimed yet are included (see KeyHistory).
func (v *View) Histories(fn func(KeyHistory) bool) {
	v.st.tree.Ascend(func(e *entry) bool {
		h := KeyHistory{Key: e.key}
		for ver := e.hist; ver != nil; ver = ver.next {
			h.Versions = append(h.Versions, KeyValue{Key: e.key, Value: ver.value, CreateRevision: ver.create,
				ModRevision: ver.mod, Version: ver.version, Encoding: ver.encoding, Lease: ver.lease})
		}
		return fn(h)
	})
}

// SnapshotWriter writes a snapshot stream (the format of snapshot.go, format 3: with
// leases, without lease owners) from histories that come from elsewhere, for an import
// from another store's files. Keys must come in ascending order, each with its history
// newest first; then the leases, ascending IDs. The writer checks nothing: whoever
// restores the stream (Store.Restore) checks all of it, order and revisions included,
// before it changes anything, as for any snapshot. It is not safe for concurrent use.
type SnapshotWriter struct {
	raw io.Writer
	bw  *bufio.Writer
	crc hash.Hash32
	b   []byte
	err error
	end bool
}

// NewSnapshotWriter starts a snapshot at revision and compactRev (no cluster ID, no
// secret: a restore gives the stream its cluster's own) and writes its head to w.
func NewSnapshotWriter(w io.Writer, revision, compactRev int64) *SnapshotWriter {
	crc := crc32.New(castagnoli)
	sw := &SnapshotWriter{raw: w, crc: crc, bw: bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)}
	b := append([]byte(snapshotMagic), snapshotFormatV3)
	b = binary.AppendVarint(b, revision)
	b = binary.AppendVarint(b, compactRev)
	b = binary.AppendUvarint(b, 0) // applied index: the restoring Raft sets its own
	b = appendBytes(b, nil)        // cluster ID
	b = appendBytes(b, nil)        // secret
	sw.write(b)
	return sw
}

func (sw *SnapshotWriter) write(b []byte) {
	if sw.err == nil {
		_, sw.err = sw.bw.Write(b)
	}
}

// Key writes one key's history (newest first; see KeyHistory).
func (sw *SnapshotWriter) Key(h KeyHistory) error {
	if sw.end {
		return fmt.Errorf("fsm: snapshot writer: key %q after the leases", h.Key)
	}
	b := appendBytes(sw.b[:0], h.Key)
	b = binary.AppendUvarint(b, uint64(len(h.Versions)))
	for _, v := range h.Versions {
		b = appendBytes(b, v.Value)
		b = binary.AppendVarint(b, v.CreateRevision)
		b = binary.AppendVarint(b, v.ModRevision)
		b = binary.AppendVarint(b, v.Version)
		b = appendBytes(b, []byte(v.Encoding))
		b = binary.AppendVarint(b, v.Lease)
	}
	sw.b = b
	sw.write(b)
	return sw.err
}

// Close writes the leases (ascending IDs; Owner is not written), the checksum, and
// flushes. The writer is done after it.
func (sw *SnapshotWriter) Close(leases []Lease) error {
	if sw.end {
		return fmt.Errorf("fsm: snapshot writer closed twice")
	}
	sw.end = true
	b := append(sw.b[:0], 0) // end of keys
	b = binary.AppendUvarint(b, uint64(len(leases)))
	for _, l := range leases {
		b = binary.AppendVarint(b, l.ID)
		b = binary.AppendVarint(b, l.TTL)
		b = binary.AppendVarint(b, l.Remaining)
		b = binary.AppendUvarint(b, l.CheckpointIndex)
	}
	sw.write(b)
	if sw.err == nil {
		sw.err = sw.bw.Flush()
	}
	if sw.err != nil {
		return sw.err
	}
	// The checksum is not part of what it sums: it goes to w only.
	_, err := sw.raw.Write(binary.BigEndian.AppendUint32(nil, sw.crc.Sum32()))
	return err
}
