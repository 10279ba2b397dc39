package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// The etcd envelope of a saved snapshot (what the etcd door's Maintenance.Snapshot
// streams, so that `etcdctl snapshot save` keeps it):
//
//	the saved snapshot file (snapshot_file.go), n bytes
//	zero bytes, so that n + padding + 16 is a multiple of 512
//	"KEELETCD" n:uint64 big-endian                     (the trailer, 16 bytes)
//	sha256 of everything before it: 32 bytes
//
// etcd's client checks only that a snapshot's size is a multiple of 512 plus a sha256
// (snapshot.hasChecksum), since a bbolt file is a whole number of pages; etcdutl's
// restore checks the sha256. keel reads the envelope back (savedStream): `keel
// snapshot restore FILE` takes a file etcdctl saved from keel as it takes one `keel
// snapshot save` wrote. etcdutl snapshot restore and status cannot read it: the
// content is keel's snapshot, not a bbolt database.
//
// Compatibility: a reader that finds no trailer (or a sha256 that does not match)
// reads the file as a plain saved snapshot, whose MAC then decides.
const (
	etcdEnvelopeMagic   = "KEELETCD"
	etcdEnvelopeTrailer = len(etcdEnvelopeMagic) + 8
	etcdEnvelopeAlign   = 512
)

// SaveEtcdSnapshot writes a saved snapshot file (as GET /v1/agent/snapshot answers) in
// its etcd envelope to w. It reflects every write acknowledged before the call. The
// caller checks the right to save (the snapshot right).
func (a *Agent) SaveEtcdSnapshot(ctx context.Context, w io.Writer) error {
	return writeEtcdEnvelope(w, func(w io.Writer) error { return a.writeSaved(ctx, w) })
}

// writeEtcdEnvelope writes to w what content writes, in the etcd envelope.
func writeEtcdEnvelope(w io.Writer, content func(io.Writer) error) error {
	sum := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(w, sum)}
	if err := content(cw); err != nil {
		return err
	}
	n := cw.n
	pad := (etcdEnvelopeAlign - (n+int64(etcdEnvelopeTrailer))%etcdEnvelopeAlign) % etcdEnvelopeAlign
	trailer := make([]byte, pad, pad+int64(etcdEnvelopeTrailer))
	trailer = append(trailer, etcdEnvelopeMagic...)
	trailer = binary.BigEndian.AppendUint64(trailer, uint64(n))
	if _, err := cw.Write(trailer); err != nil {
		return err
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

// writeSaved writes a saved snapshot file: head, the state machine's snapshot, MAC.
func (a *Agent) writeSaved(ctx context.Context, w io.Writer) error {
	mac, err := a.snapshotMAC()
	if err != nil {
		return err
	}
	out := io.MultiWriter(w, mac)
	if _, err := out.Write(append([]byte(savedMagic), savedFormat)); err != nil {
		return err
	}
	idx, _, err := a.node.SaveSnapshot(ctx, out)
	if err != nil {
		return err
	}
	if _, err := w.Write(mac.Sum(nil)); err != nil {
		return err
	}
	a.log.Info("snapshot saved", "index", idx)
	return nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// unwrapEtcdEnvelope returns the saved snapshot file inside an etcd envelope, or ok
// false when r (size bytes) is not one whose sha256 matches: the caller then reads r
// as a plain saved file.
func unwrapEtcdEnvelope(r io.ReaderAt, size int64) (inner *io.SectionReader, ok bool, err error) {
	tail := int64(etcdEnvelopeTrailer + sha256.Size)
	if size < tail || size%etcdEnvelopeAlign != sha256.Size {
		return nil, false, nil
	}
	trailer := make([]byte, tail)
	if _, err := r.ReadAt(trailer, size-tail); err != nil {
		return nil, false, fmt.Errorf("read the snapshot's trailer: %w", err)
	}
	if string(trailer[:len(etcdEnvelopeMagic)]) != etcdEnvelopeMagic {
		return nil, false, nil
	}
	n := binary.BigEndian.Uint64(trailer[len(etcdEnvelopeMagic):etcdEnvelopeTrailer])
	if n > uint64(size-tail) || size-tail-int64(n) >= etcdEnvelopeAlign {
		return nil, false, nil
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(r, 0, size-sha256.Size)); err != nil {
		return nil, false, fmt.Errorf("read the snapshot: %w", err)
	}
	if !bytes.Equal(sum.Sum(nil), trailer[etcdEnvelopeTrailer:]) {
		return nil, false, nil
	}
	return io.NewSectionReader(r, 0, int64(n)), true, nil
}
