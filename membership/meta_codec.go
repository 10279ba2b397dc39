package membership

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/keel-kv/keel/internal/wire"
)

// MetaFormatVersion is the metadata format version this release writes.
//
// The encoding is compact and forward compatible:
//
//	byte 0      format version (1..127 share the framing below; 0 and 128.. do not)
//	then fields, in strictly increasing tag order, each
//	  tag       1 byte (see tagNodeID...)
//	  length    uvarint, bytes of value
//	  value     string bytes | uvarint | 8-byte big-endian uint64 | 1 byte bool
//
// Zero values are omitted. A decoder skips tags it does not know, so a newer release
// may add fields (new tags) and bump the version up to 127 without breaking older
// members: they read the fields they know. A field's meaning never changes under its
// tag; an incompatible framing must use version 128 or above, which older decoders
// refuse with ErrUnknownMetaFormat instead of guessing.
//
// For example {NodeID: "n1", MaxCommandFormat: 1} encodes as
//
//	01  01 02 'n' '1'  06 01 01
//	ver tag len value  tag len value
const MetaFormatVersion = 1

// metaFormatCompatMax is the newest format version whose framing this release reads.
const metaFormatCompatMax = 127

// Field tags. Never reuse or renumber one; add new fields at the end.
const (
	tagNodeID           = 1
	tagRaftAddr         = 2
	tagHTTPAddr         = 3
	tagRelease          = 4
	tagMinCommandFormat = 5
	tagMaxCommandFormat = 6
	tagClusterLabel     = 7
	tagIncarnation      = 8
	tagBootstrapExpect  = 9
	tagHasRaftState     = 10
	tagLeaving          = 11
	tagStorageVersions  = 12
	tagKeyMigrations    = 13
	tagRejoining        = 14
)

// EncodeMeta validates m and encodes it (see MetaFormatVersion). It fails with
// ErrInvalidMeta for a bad field and ErrMetaTooLarge if the result would exceed
// MetaMaxSize bytes. The encoding is deterministic: equal metadata, equal bytes.
func EncodeMeta(m Meta) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 128)
	b = append(b, MetaFormatVersion)
	b = appendString(b, tagNodeID, m.NodeID)
	b = appendString(b, tagRaftAddr, m.RaftAddr)
	b = appendString(b, tagHTTPAddr, m.HTTPAddr)
	b = appendString(b, tagRelease, m.Release)
	b = appendUint(b, tagMinCommandFormat, uint64(m.MinCommandFormat))
	b = appendUint(b, tagMaxCommandFormat, uint64(m.MaxCommandFormat))
	b = appendString(b, tagClusterLabel, m.ClusterLabel)
	if m.Incarnation != 0 {
		b = appendField(b, tagIncarnation, binary.BigEndian.AppendUint64(nil, m.Incarnation))
	}
	b = appendUint(b, tagBootstrapExpect, uint64(m.BootstrapExpect))
	b = appendBool(b, tagHasRaftState, m.HasRaftState)
	b = appendBool(b, tagLeaving, m.Leaving)
	if len(m.StorageVersions) > 0 {
		b = appendField(b, tagStorageVersions, encodeStorageVersions(m.StorageVersions))
	}
	if len(m.KeyMigrations) > 0 {
		b = appendField(b, tagKeyMigrations, encodeKeyMigrations(m.KeyMigrations))
	}
	b = appendBool(b, tagRejoining, m.Rejoining)
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w: node %q metadata encodes to %d bytes, limit %d (memberlist MetaMaxSize); shorten addresses or list fewer storage versions",
			ErrMetaTooLarge, m.NodeID, len(b), MetaMaxSize)
	}
	return b, nil
}

func appendField(b []byte, tag byte, val []byte) []byte {
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(val)))
	return append(b, val...)
}

func appendString(b []byte, tag byte, s string) []byte {
	if s == "" {
		return b
	}
	return appendField(b, tag, []byte(s))
}

func appendUint(b []byte, tag byte, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendField(b, tag, binary.AppendUvarint(nil, v))
}

func appendBool(b []byte, tag byte, v bool) []byte {
	if !v {
		return b
	}
	return appendField(b, tag, []byte{1})
}

// encodeStorageVersions writes a table of the distinct version names, then each
// resource (sorted) with indexes into the table, so "v1" repeated across resources
// and lists costs one byte per use:
//
//	uvarint n, n × (uvarint len, bytes)                 version table, sorted
//	uvarint r, r × (uvarint len, resource bytes,
//	               uvarint encoding index+1 (0: none),
//	               uvarint d, d × uvarint index,        decodable versions
//	               uvarint s, s × uvarint index)        served versions
func encodeStorageVersions(svs map[string]StorageVersion) []byte {
	seen := map[string]bool{}
	for _, sv := range svs {
		for _, v := range slices.Concat([]string{sv.EncodingVersion}, sv.DecodableVersions, sv.ServedVersions) {
			if v != "" {
				seen[v] = true
			}
		}
	}
	table := slices.Sorted(maps.Keys(seen))
	index := make(map[string]uint64, len(table))
	b := binary.AppendUvarint(nil, uint64(len(table)))
	for i, v := range table {
		index[v] = uint64(i)
		b = appendBytes(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(svs)))
	for _, res := range slices.Sorted(maps.Keys(svs)) {
		sv := svs[res]
		b = appendBytes(b, res)
		enc := uint64(0)
		if sv.EncodingVersion != "" {
			enc = index[sv.EncodingVersion] + 1
		}
		b = binary.AppendUvarint(b, enc)
		for _, list := range [][]string{sv.DecodableVersions, sv.ServedVersions} {
			b = binary.AppendUvarint(b, uint64(len(list)))
			for _, v := range list {
				b = binary.AppendUvarint(b, index[v])
			}
		}
	}
	return b
}

func appendBytes(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeMeta decodes metadata written by EncodeMeta of this or any release whose
// format version shares the framing (1..127), skipping fields it does not know. It
// never panics: malformed input is ErrMetaCorrupt, an incompatible future format is
// ErrUnknownMetaFormat. It does not call Validate.
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty", ErrMetaCorrupt)
	}
	switch v := b[0]; {
	case v == 0:
		return m, fmt.Errorf("%w: format version 0", ErrMetaCorrupt)
	case v > metaFormatCompatMax:
		return m, fmt.Errorf("%w: format version %d (this release reads versions 1 to %d; upgrade this node)",
			ErrUnknownMetaFormat, v, metaFormatCompatMax)
	}
	rest := b[1:]
	last := 0
	for len(rest) > 0 {
		tag := rest[0]
		if int(tag) <= last {
			return m, fmt.Errorf("%w: field tag %d after tag %d", ErrMetaCorrupt, tag, last)
		}
		last = int(tag)
		n, k := binary.Uvarint(rest[1:])
		if k <= 0 || n > uint64(len(rest)-1-k) {
			return m, fmt.Errorf("%w: field tag %d: truncated length or value", ErrMetaCorrupt, tag)
		}
		val := rest[1+k : 1+k+int(n)]
		rest = rest[1+k+int(n):]
		if err := m.decodeField(tag, val); err != nil {
			return m, fmt.Errorf("%w: field tag %d: %w", ErrMetaCorrupt, tag, err)
		}
	}
	return m, nil
}

func (m *Meta) decodeField(tag byte, val []byte) error {
	var err error
	switch tag {
	case tagNodeID:
		m.NodeID = string(val)
	case tagRaftAddr:
		m.RaftAddr = string(val)
	case tagHTTPAddr:
		m.HTTPAddr = string(val)
	case tagRelease:
		m.Release = string(val)
	case tagClusterLabel:
		m.ClusterLabel = string(val)
	case tagMinCommandFormat:
		m.MinCommandFormat, err = decodeInt(val)
	case tagMaxCommandFormat:
		m.MaxCommandFormat, err = decodeInt(val)
	case tagBootstrapExpect:
		m.BootstrapExpect, err = decodeInt(val)
	case tagIncarnation:
		if len(val) != 8 {
			return fmt.Errorf("incarnation is %d bytes, want 8", len(val))
		}
		m.Incarnation = binary.BigEndian.Uint64(val)
	case tagHasRaftState:
		m.HasRaftState, err = decodeBool(val)
	case tagLeaving:
		m.Leaving, err = decodeBool(val)
	case tagStorageVersions:
		m.StorageVersions, err = decodeStorageVersions(val)
	case tagKeyMigrations:
		m.KeyMigrations, err = decodeKeyMigrations(val)
	case tagRejoining:
		m.Rejoining, err = decodeBool(val)
	default:
		// A field of a newer release: skipped, as the format promises.
	}
	return err
}

func decodeInt(val []byte) (int, error) {
	v, k := binary.Uvarint(val)
	if k <= 0 || k != len(val) {
		return 0, fmt.Errorf("bad uvarint")
	}
	if v > math.MaxInt32 {
		return 0, fmt.Errorf("integer %d out of range", v)
	}
	return int(v), nil
}

func decodeBool(val []byte) (bool, error) {
	if len(val) != 1 || val[0] > 1 {
		return false, fmt.Errorf("bad bool")
	}
	return val[0] == 1, nil
}

func decodeStorageVersions(val []byte) (map[string]StorageVersion, error) {
	r := svReader{wire.NewReader(val, errStorageVersions)}
	table := make([]string, r.count())
	for i := range table {
		table[i] = r.str()
	}
	nres := r.count()
	out := make(map[string]StorageVersion, nres)
	for i := 0; i < nres && r.Err() == nil; i++ {
		res := r.str()
		var sv StorageVersion
		if enc := r.Uvarint("encoding index"); enc > 0 {
			sv.EncodingVersion = r.lookup(table, enc-1)
		}
		sv.DecodableVersions = r.list(table)
		sv.ServedVersions = r.list(table)
		if _, dup := out[res]; dup && r.Err() == nil {
			r.Fail("resource %q twice", res)
		}
		out[res] = sv
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return out, nil
}

// errStorageVersions is what the storage-versions field's decoding errors wrap.
var errStorageVersions = errors.New("storage versions")

// svReader reads the storage-versions field: a wire.Reader (sticky error) with its
// table lookups.
type svReader struct{ *wire.Reader }

// count reads an element count, bounded by the bytes left (each element takes at
// least one), so hostile input cannot make the decoder allocate much.
func (r svReader) count() int { return r.Count("count", 1) }

func (r svReader) str() string { return string(r.Bytes("string", math.MaxUint64)) }

func (r svReader) lookup(table []string, i uint64) string {
	if r.Err() == nil && i >= uint64(len(table)) {
		r.Fail("version index %d outside table of %d", i, len(table))
	}
	if r.Err() != nil {
		return ""
	}
	return table[i]
}

func (r svReader) list(table []string) []string {
	n := r.count()
	if n == 0 || r.Err() != nil {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.lookup(table, r.Uvarint("version index"))
	}
	return out
}

// encodeKeyMigrations writes the key migrations a node supports with the phase it
// applies, sorted by name:
//
//	uvarint n, n × (uvarint len, name bytes, uvarint phase)
func encodeKeyMigrations(kms map[string]int) []byte {
	b := binary.AppendUvarint(nil, uint64(len(kms)))
	for _, name := range slices.Sorted(maps.Keys(kms)) {
		b = appendBytes(b, name)
		b = binary.AppendUvarint(b, uint64(kms[name]))
	}
	return b
}

// errKeyMigrations is what the key-migrations field's decoding errors wrap.
var errKeyMigrations = errors.New("key migrations")

func decodeKeyMigrations(val []byte) (map[string]int, error) {
	r := svReader{wire.NewReader(val, errKeyMigrations)}
	n := r.count()
	out := make(map[string]int, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		name := r.str()
		phase := r.Uvarint("phase")
		if r.Err() != nil {
			break
		}
		if phase > 255 {
			r.Fail("key migration %q: phase %d out of range", name, phase)
		}
		if _, dup := out[name]; dup {
			r.Fail("key migration %q twice", name)
		}
		out[name] = int(phase)
	}
	if err := r.Finish(); err != nil {
		return nil, err
	}
	return out, nil
}
