package membership

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MetaMaxSize is the most bytes encoded node metadata may take: memberlist's
// MetaMaxSize, the room it gives a node's metadata in every alive message.
const MetaMaxSize = 512

// MaxNodeIDLen bounds Meta.NodeID (and Config.NodeID), in bytes.
const MaxNodeIDLen = 128

// Meta is what a node tells every other member about itself. It travels in each of
// memberlist's alive messages and full state syncs, so it is small (at most MetaMaxSize
// bytes encoded, see EncodeMeta) and changes rarely (UpdateMeta).
//
// A Meta handed to Open or UpdateMeta is copied; a Meta returned by Members, Local or
// an Event is the caller's own copy.
type Meta struct {
	// NodeID is the node's unique, stable name: its memberlist name and Raft server ID.
	NodeID string
	// RaftAddr is the advertised Raft (and forwarding RPC) address, host:port.
	RaftAddr string
	// HTTPAddr is the advertised HTTP API address, host:port.
	HTTPAddr string
	// Release is the keel release the node runs (internal/buildinfo.Version()).
	Release string
	// MinCommandFormat and MaxCommandFormat bound the Raft command formats
	// (fsm.EncodeCommand's first byte) the node can apply.
	MinCommandFormat int
	MaxCommandFormat int
	// ClusterLabel names the cluster; peers announcing another label are rejected.
	ClusterLabel string
	// Incarnation is a random number chosen at each process start (Open picks one when
	// it is zero), so a restarted node with the same NodeID is told apart from its
	// previous life. UpdateMeta keeps the value Open chose.
	Incarnation uint64
	// BootstrapExpect is the node's -bootstrap-expect value (0: it will not bootstrap).
	BootstrapExpect int
	// HasRaftState says the node has Raft state on disk (it has been part of a cluster),
	// which forbids bootstrapping a new one (see BootstrapReady).
	HasRaftState bool
	// Leaving is set by Leave just before the node departs, so peers record it as left
	// rather than failed. UpdateMeta ignores the caller's value.
	Leaving bool
	// Rejoining says the node is being rebuilt from its peers (raft-rejoin): its own
	// rejoin asks to be made a voter once caught up, so the leader's autopilot leaves
	// its promotion to it. Older releases skip the field and may promote it too.
	Rejoining bool
	// StorageVersions maps a resource name to the storage encodings this node uses.
	StorageVersions map[string]StorageVersion
	// KeyMigrations maps each key migration the node supports (its schema declares it)
	// to the phase the node applies now. A node of a release before key migrations
	// announces none, which blocks every advance (see migrate.AdvanceBlocked).
	KeyMigrations map[string]int
}

// StorageVersion is one node's view of one resource's encodings (KEP-2339).
type StorageVersion struct {
	EncodingVersion   string
	DecodableVersions []string
	ServedVersions    []string
}

// Clone returns a deep copy of m.
func (m Meta) Clone() Meta {
	m.KeyMigrations = maps.Clone(m.KeyMigrations)
	if m.StorageVersions == nil {
		return m
	}
	sv := make(map[string]StorageVersion, len(m.StorageVersions))
	for k, v := range m.StorageVersions {
		sv[k] = StorageVersion{
			EncodingVersion:   v.EncodingVersion,
			DecodableVersions: slices.Clone(v.DecodableVersions),
			ServedVersions:    slices.Clone(v.ServedVersions),
		}
	}
	m.StorageVersions = sv
	return m
}

// Validate reports the first field that breaks the metadata rules: a NodeID of 1 to
// MaxNodeIDLen printable bytes without spaces, non-negative command formats with
// Min <= Max (both <= 255), a non-negative BootstrapExpect, valid UTF-8 strings and
// non-empty resource and version names.
func (m Meta) Validate() error {
	if err := validateNodeID(m.NodeID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMeta, err)
	}
	switch {
	case m.MinCommandFormat < 0 || m.MinCommandFormat > 255:
		return fmt.Errorf("%w: MinCommandFormat %d out of range [0, 255]", ErrInvalidMeta, m.MinCommandFormat)
	case m.MaxCommandFormat < 0 || m.MaxCommandFormat > 255:
		return fmt.Errorf("%w: MaxCommandFormat %d out of range [0, 255]", ErrInvalidMeta, m.MaxCommandFormat)
	case m.MinCommandFormat > m.MaxCommandFormat:
		return fmt.Errorf("%w: MinCommandFormat %d > MaxCommandFormat %d", ErrInvalidMeta, m.MinCommandFormat, m.MaxCommandFormat)
	case m.BootstrapExpect < 0:
		return fmt.Errorf("%w: BootstrapExpect %d < 0", ErrInvalidMeta, m.BootstrapExpect)
	}
	for name, s := range map[string]string{"RaftAddr": m.RaftAddr, "HTTPAddr": m.HTTPAddr, "Release": m.Release, "ClusterLabel": m.ClusterLabel} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidMeta, name, s)
		}
	}
	for name, phase := range m.KeyMigrations {
		if name == "" || !utf8.ValidString(name) || phase < 0 || phase > 255 {
			return fmt.Errorf("%w: KeyMigrations: %q phase %d: want a UTF-8 name and a phase in [0, 255]",
				ErrInvalidMeta, name, phase)
		}
	}
	for _, res := range slices.Sorted(maps.Keys(m.StorageVersions)) {
		if err := validateStorageVersion(res, m.StorageVersions[res]); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidMeta, err)
		}
	}
	return nil
}

func validateNodeID(id string) error {
	if id == "" {
		return fmt.Errorf("NodeID is empty")
	}
	if len(id) > MaxNodeIDLen {
		return fmt.Errorf("NodeID %q is %d bytes, limit %d", id[:16]+"...", len(id), MaxNodeIDLen)
	}
	if !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool {
		return unicode.IsSpace(r) || !unicode.IsPrint(r)
	}) {
		return fmt.Errorf("NodeID %q has spaces, control or invalid characters", id)
	}
	return nil
}

func validateStorageVersion(res string, sv StorageVersion) error {
	if res == "" || !utf8.ValidString(res) {
		return fmt.Errorf("StorageVersions: resource name %q is empty or not UTF-8", res)
	}
	if !utf8.ValidString(sv.EncodingVersion) {
		return fmt.Errorf("StorageVersions[%q]: EncodingVersion is not UTF-8", res)
	}
	for _, v := range slices.Concat(sv.DecodableVersions, sv.ServedVersions) {
		if v == "" || !utf8.ValidString(v) {
			return fmt.Errorf("StorageVersions[%q]: version %q is empty or not UTF-8", res, v)
		}
	}
	return nil
}
