package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	"github.com/google/btree"
)

// Snapshot stream layout (format 2):
//
//	"KEELSNAP" format:byte
//	revision:varint compactRev:varint applied:uvarint clusterID:bytes secret:bytes
//	{ key:bytes(non-empty) n:uvarint { value:bytes create:varint mod:varint version:varint encoding:bytes }×n }*
//	0:uvarint (end of keys)  crc32c(everything before):4 bytes big-endian
//
// Format 1 (written by earlier releases, still restored) has no encoding per version:
// its values are untagged.
// Keys are in ascending order and each history newest first, so Restore rebuilds the
// tree in one pass and checks the order as it goes.

const (
	snapshotMagic     = "KEELSNAP"
	snapshotFormatV1  = byte(1)
	snapshotFormatV2  = byte(2)
	maxSnapshotKey    = 1 << 20  // far above the API's 4 KiB key limit
	maxSnapshotValue  = 64 << 20 // far above the API's value limit
	maxSnapshotSecret = 1 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a point-in-time copy of the store taken in O(1); WriteTo streams it.
type Snapshot struct {
	st state
}

// Snapshot captures the current state. Writes go on while the snapshot is written.
func (s *Store) Snapshot() *Snapshot {
	return &Snapshot{st: s.View().st}
}

// AppliedIndex is the log index the snapshot reflects.
func (sn *Snapshot) AppliedIndex() uint64 { return sn.st.applied }

// WriteTo streams the snapshot to w.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(cw, crc), 256<<10)
	var b []byte
	b = append(b, snapshotMagic...)
	b = append(b, snapshotFormatV2)
	b = binary.AppendVarint(b, sn.st.revision)
	b = binary.AppendVarint(b, sn.st.compactRev)
	b = binary.AppendUvarint(b, sn.st.applied)
	b = appendBytes(b, []byte(sn.st.clusterID))
	b = appendBytes(b, sn.st.secret)
	if _, err := bw.Write(b); err != nil {
		return cw.n, err
	}
	var werr error
	sn.st.tree.Ascend(func(e *entry) bool {
		b = appendBytes(b[:0], e.key)
		n := 0
		for v := e.hist; v != nil; v = v.next {
			n++
		}
		b = binary.AppendUvarint(b, uint64(n))
		for v := e.hist; v != nil; v = v.next {
			b = appendBytes(b, v.value)
			b = binary.AppendVarint(b, v.create)
			b = binary.AppendVarint(b, v.mod)
			b = binary.AppendVarint(b, v.version)
			b = appendBytes(b, []byte(v.encoding))
		}
		_, werr = bw.Write(b)
		return werr == nil
	})
	if werr != nil {
		return cw.n, werr
	}
	if _, err := bw.Write([]byte{0}); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	sum := binary.BigEndian.AppendUint32(nil, crc.Sum32())
	_, err := cw.Write(sum)
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore replaces the whole state with a snapshot read from r. The snapshot is read
// and checked completely before anything changes: on ErrCorrupt or ErrUnknownFormat the
// store is left as it was.
func (s *Store) Restore(r io.Reader) error {
	st, pending, err := readSnapshot(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = st
	s.pending = pending
	s.publishLocked()
	return nil
}

// snapReader reads the snapshot stream, feeding every byte it consumes to a CRC.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	err error
}

func (sr *snapReader) fail(format string, args ...any) {
	if sr.err == nil {
		sr.err = fmt.Errorf("%w: snapshot: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
}

func (sr *snapReader) ReadByte() (byte, error) {
	c, err := sr.r.ReadByte()
	if err == nil {
		sr.crc.Write([]byte{c})
	}
	return c, err
}

func (sr *snapReader) full(p []byte) {
	if sr.err != nil {
		return
	}
	if _, err := io.ReadFull(sr.r, p); err != nil {
		sr.fail("truncated")
		return
	}
	sr.crc.Write(p)
}

func (sr *snapReader) uvarint() uint64 {
	if sr.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(sr)
	if err != nil {
		sr.fail("bad varint")
	}
	return v
}

func (sr *snapReader) varint() int64 {
	if sr.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(sr)
	if err != nil {
		sr.fail("bad varint")
	}
	return v
}

func (sr *snapReader) bytes(max uint64, what string) []byte {
	n := sr.uvarint()
	if sr.err != nil {
		return nil
	}
	if n > max {
		sr.fail("%s of %d bytes exceeds %d", what, n, max)
		return nil
	}
	if n == 0 {
		return nil
	}
	if n <= 64<<10 {
		p := make([]byte, n)
		sr.full(p)
		return p
	}
	// Grow as data arrives rather than trusting a large n, so a lying length costs
	// nothing.
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, sr.r, int64(n)); err != nil {
		sr.fail("truncated %s", what)
		return nil
	}
	p := buf.Bytes()
	sr.crc.Write(p)
	return p
}

func readSnapshot(r io.Reader) (state, compactQueue, error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(castagnoli)}
	head := make([]byte, len(snapshotMagic)+1)
	sr.full(head)
	if sr.err != nil || string(head[:len(snapshotMagic)]) != snapshotMagic {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: bad magic", ErrCorrupt)
	}
	format := head[len(snapshotMagic)]
	if format != snapshotFormatV1 && format != snapshotFormatV2 {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot format %d (this build reads %d..%d)",
			ErrUnknownFormat, format, snapshotFormatV1, snapshotFormatV2)
	}
	st := state{tree: btree.NewG(btreeDegree, entryLess)}
	st.revision = sr.varint()
	st.compactRev = sr.varint()
	st.applied = sr.uvarint()
	st.clusterID = string(sr.bytes(maxSnapshotSecret, "cluster id"))
	st.secret = sr.bytes(maxSnapshotSecret, "secret")
	if sr.err == nil && (st.revision < 0 || st.compactRev < 0 || st.compactRev > st.revision) {
		sr.fail("revision %d, compact revision %d", st.revision, st.compactRev)
	}
	var pending []pendingKey
	var prev []byte
	for sr.err == nil {
		key := sr.bytes(maxSnapshotKey, "key")
		if sr.err != nil || key == nil {
			break
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			sr.fail("keys out of order at %q", key)
			break
		}
		prev = key
		n := sr.uvarint()
		if n == 0 && sr.err == nil {
			sr.fail("key %q has no versions", key)
		}
		var versions []*version
		for i := uint64(0); i < n && sr.err == nil; i++ {
			v := &version{value: sr.bytes(maxSnapshotValue, "value"), create: sr.varint(),
				mod: sr.varint(), version: sr.varint()}
			if format >= snapshotFormatV2 {
				v.encoding = string(sr.bytes(MaxEncodingLen, "encoding"))
			}
			switch {
			case sr.err != nil:
			case v.mod <= 0 || v.mod > st.revision:
				sr.fail("key %q: mod revision %d outside (0, %d]", key, v.mod, st.revision)
			case len(versions) > 0 && v.mod >= versions[len(versions)-1].mod:
				sr.fail("key %q: versions out of order", key)
			case v.create < 0 || v.create > v.mod || (v.create == 0 && (v.version != 0 || v.value != nil || v.encoding != "")):
				sr.fail("key %q: bad version metadata", key)
			}
			versions = append(versions, v)
		}
		if sr.err != nil {
			break
		}
		for i := len(versions) - 2; i >= 0; i-- {
			versions[i].next = versions[i+1]
		}
		for i := 1; i < len(versions); i++ {
			pending = append(pending, pendingKey{rev: versions[i-1].mod, key: key})
		}
		if last := versions[len(versions)-1]; last.tombstone() {
			pending = append(pending, pendingKey{rev: last.mod, key: key})
		}
		st.tree.ReplaceOrInsert(&entry{key: key, hist: versions[0]})
		if head := versions[0]; !head.tombstone() && head.encoding != "" {
			if st.encodings == nil {
				st.encodings = make(map[string]int64)
			}
			st.encodings[head.encoding]++
		}
	}
	if sr.err != nil {
		return state{}, compactQueue{}, sr.err
	}
	want := sr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(sr.r, sum[:]); err != nil {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: missing checksum", ErrCorrupt)
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: checksum mismatch", ErrCorrupt)
	}
	if _, err := sr.r.ReadByte(); !errors.Is(err, io.EOF) {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: trailing data", ErrCorrupt)
	}
	slices.SortStableFunc(pending, func(a, b pendingKey) int { return cmpInt(a.rev, b.rev) })
	return st, newCompactQueue(pending), nil
}
