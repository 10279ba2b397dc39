package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/keel-kv/keel/internal/wire"
)

// Snapshot stream layout (format 4):
//
//	"KEELSNAP" format:byte
//	revision:varint compactRev:varint applied:uvarint clusterID:bytes secret:bytes
//	{ key:bytes(non-empty) n:uvarint { value:bytes create:varint mod:varint version:varint encoding:bytes lease:varint }×n }*
//	0:uvarint (end of keys)
//	m:uvarint { id:varint ttl:varint remaining:varint checkpointIndex:uvarint owner:bytes }×m (leases, ascending IDs)
//	crc32c(everything before):4 bytes big-endian
//
// Format 3 (v0.9.0) is format 4 without the owner of each lease. A snapshot is
// written in the oldest format that holds it: format 4 only while some lease has an
// owner (only a CommandFormatV5 grant makes one, which the format gate lets through
// only once every voter applies it, so every voter restores format 4 too), format 3
// while leases exist or were ever granted, and format 2 in a store in which no lease
// was ever granted, so that nodes of v0.9.0 restore its snapshots during a rolling
// upgrade.
// Format 2 (v0.9.0) has no lease per version and no lease list; format 1 (earlier
// releases) has no encoding per version either: its values are untagged. Both are
// still restored. The lease → keys index is not stored: Restore rebuilds it from the
// live heads, and refuses a key attached to a lease the snapshot does not hold.
// Keys are in ascending order and each history newest first, so Restore rebuilds the
// tree in one pass and checks the order as it goes.

const (
	snapshotMagic     = "KEELSNAP"
	snapshotFormatV1  = byte(1)
	snapshotFormatV2  = byte(2)
	snapshotFormatV3  = byte(3)
	snapshotFormatV4  = byte(4)
	maxSnapshotKey    = 1 << 20  // far above the API's 4 KiB key limit
	maxSnapshotValue  = 64 << 20 // far above the API's value limit
	maxSnapshotSecret = 1 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errSnapshotCorrupt is what a snapshot's decoding errors wrap (and, through it,
// ErrCorrupt).
var errSnapshotCorrupt = fmt.Errorf("%w: snapshot", ErrCorrupt)

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
	format := sn.st.ls.snapshotFormat()
	b = append(b, format)
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
			if format >= snapshotFormatV3 {
				b = binary.AppendVarint(b, v.lease)
			}
		}
		_, werr = bw.Write(b)
		return werr == nil
	})
	if werr != nil {
		return cw.n, werr
	}
	b = append(b[:0], 0)
	if format >= snapshotFormatV3 {
		b = binary.AppendUvarint(b, uint64(sn.st.ls.leases.Len()))
		sn.st.ls.leases.Ascend(func(l *Lease) bool {
			b = binary.AppendVarint(b, l.ID)
			b = binary.AppendVarint(b, l.TTL)
			b = binary.AppendVarint(b, l.Remaining)
			b = binary.AppendUvarint(b, l.CheckpointIndex)
			if format >= snapshotFormatV4 {
				b = appendBytes(b, []byte(l.Owner))
			}
			return true
		})
	}
	if _, err := bw.Write(b); err != nil {
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
	s.restoreLocked(st, pending)
	return nil
}

// RestoreAt is Restore for a snapshot that Raft installs at log index index: the
// index of the last entry the snapshot reflects, or for an operator's restore
// (Raft.Restore) the fresh index Raft gives it, past every entry of the log. The
// restored state's applied index is index (never less than the one the snapshot
// carries).
//
// A snapshot older than the state, index below the applied index, is refused with
// ErrStaleSnapshot and changes nothing: the state already holds every entry the
// snapshot does, and more, so restoring it would lose those entries here and make
// this replica serve revisions older than it served before. hashicorp/raft sends and
// installs such snapshots (see fsmAdapter.Restore in package raft). An operator's
// restore is never refused: its index is newer than any applied one, although the
// state it brings back is older.
func (s *Store) RestoreAt(r io.Reader, index uint64) error {
	if err := staleSnapshot(index, s.AppliedIndex()); err != nil {
		return err // before reading it all
	}
	st, pending, err := readSnapshot(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := staleSnapshot(index, s.cur.applied); err != nil {
		return err
	}
	st.applied = max(st.applied, index)
	s.restoreLocked(st, pending)
	return nil
}

// staleSnapshot refuses a snapshot at index over a state at applied.
func staleSnapshot(index, applied uint64) error {
	if index < applied {
		return fmt.Errorf("%w: snapshot at index %d, state at %d", ErrStaleSnapshot, index, applied)
	}
	return nil
}

func (s *Store) restoreLocked(st state, pending compactQueue) {
	// Whatever it held, observers look at every lease again.
	st.ls.gen = s.cur.ls.gen + 1
	st.ls.journalBase = st.ls.gen
	s.cur = st
	s.pending = pending
	s.restoredLocked()
	s.publishLocked()
}

func readSnapshot(r io.Reader) (state, compactQueue, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	crc := crc32.New(castagnoli)
	sr := wire.NewStreamReader(br, errSnapshotCorrupt, crc)
	head := sr.Raw("magic", len(snapshotMagic)+1)
	if sr.Err() != nil || string(head[:len(snapshotMagic)]) != snapshotMagic {
		return state{}, compactQueue{}, fmt.Errorf("%w: it does not start with %q", ErrNotSnapshot, snapshotMagic)
	}
	format := head[len(snapshotMagic)]
	if format < snapshotFormatV1 || format > snapshotFormatV4 {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot format %d (this build reads %d..%d)",
			ErrUnknownFormat, format, snapshotFormatV1, snapshotFormatV4)
	}
	st := state{tree: newKeyTree(), ls: newLeaseState()}
	st.revision = sr.Varint("revision")
	st.compactRev = sr.Varint("compact revision")
	st.applied = sr.Uvarint("applied index")
	st.clusterID = string(sr.Bytes("cluster id", maxSnapshotSecret))
	st.secret = sr.Bytes("secret", maxSnapshotSecret)
	if sr.Err() == nil && (st.revision < 0 || st.compactRev < 0 || st.compactRev > st.revision) {
		sr.Fail("revision %d, compact revision %d", st.revision, st.compactRev)
	}
	var pending []pendingKey
	var prev []byte
	for sr.Err() == nil {
		key := sr.Bytes("key", maxSnapshotKey)
		if sr.Err() != nil || key == nil {
			break
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			sr.Fail("keys out of order at %q", key)
			break
		}
		prev = key
		n := sr.Uvarint("version count")
		if n == 0 && sr.Err() == nil {
			sr.Fail("key %q has no versions", key)
		}
		var versions []*version
		for i := uint64(0); i < n && sr.Err() == nil; i++ {
			v := &version{value: sr.Bytes("value", maxSnapshotValue), create: sr.Varint("create revision"),
				mod: sr.Varint("mod revision"), version: sr.Varint("version")}
			if format >= snapshotFormatV2 {
				v.encoding = string(sr.Bytes("encoding", MaxEncodingLen))
			}
			if format >= snapshotFormatV3 {
				v.lease = sr.Varint("lease")
			}
			switch {
			case sr.Err() != nil:
			case v.lease < 0 || (v.lease != 0 && v.tombstone()):
				sr.Fail("key %q: bad lease %d", key, v.lease)
			case v.mod <= 0 || v.mod > st.revision:
				sr.Fail("key %q: mod revision %d outside (0, %d]", key, v.mod, st.revision)
			case len(versions) > 0 && v.mod >= versions[len(versions)-1].mod:
				sr.Fail("key %q: versions out of order", key)
			case v.create < 0 || v.create > v.mod || (v.create == 0 && (v.version != 0 || v.value != nil || v.encoding != "")):
				sr.Fail("key %q: bad version metadata", key)
			}
			versions = append(versions, v)
		}
		if sr.Err() != nil {
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
	if format >= snapshotFormatV3 {
		st.ls.used = true
		readSnapshotLeases(sr, &st, format)
	}
	if err := sr.Err(); err != nil {
		return state{}, compactQueue{}, err
	}
	want := crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: missing checksum", ErrCorrupt)
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: checksum mismatch", ErrCorrupt)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return state{}, compactQueue{}, fmt.Errorf("%w: snapshot: trailing data", ErrCorrupt)
	}
	slices.SortStableFunc(pending, func(a, b pendingKey) int { return cmpInt(a.rev, b.rev) })
	return st, newCompactQueue(pending), nil
}

// readSnapshotLeases reads the lease list of a snapshot of format (3 or later) into
// st and rebuilds the lease → keys index.
func readSnapshotLeases(sr *wire.Reader, st *state, format byte) {
	n := sr.Uvarint("lease count")
	var prev int64
	for i := uint64(0); i < n && sr.Err() == nil; i++ {
		l := &Lease{ID: sr.Varint("lease id"), TTL: sr.Varint("lease ttl"), Remaining: sr.Varint("lease remaining"),
			CheckpointIndex: sr.Uvarint("lease checkpoint index")}
		if format >= snapshotFormatV4 {
			l.Owner = string(sr.Bytes("lease owner", MaxLeaseOwner))
		}
		switch {
		case sr.Err() != nil:
			return
		case l.ID <= prev:
			sr.Fail("lease %d out of order", l.ID)
			return
		case !validLeaseTTL(l.TTL) || l.Remaining < 0 || l.Remaining > l.TTL || l.CheckpointIndex > st.applied:
			sr.Fail("lease %d: bad TTL %d, remaining %d or checkpoint index %d", l.ID, l.TTL, l.Remaining, l.CheckpointIndex)
			return
		}
		prev = l.ID
		st.ls.leases.ReplaceOrInsert(l)
	}
	if sr.Err() == nil {
		if err := rebuildAttachments(st); err != nil {
			sr.Fail("%v", err)
		}
	}
}
