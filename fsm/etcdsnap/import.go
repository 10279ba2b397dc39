package etcdsnap

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/keel-kv/keel/fsm"
)

// HoldFunc says whether keel can hold key with value (one version of it): nil, or
// why not (not UTF-8, too long, too large, under a reserved prefix). The caller owns
// the rules (package kv); nil holds everything.
type HoldFunc func(key, value []byte) error

// Unholdable is one key or lease of a snapshot keel cannot hold, and why.
type Unholdable struct {
	Key    []byte // the key; nil for a lease
	Lease  int64  // the lease (for a key: the lease its latest version is attached to, if that is why)
	Reason string
}

func (u Unholdable) String() string {
	if u.Key == nil {
		return fmt.Sprintf("lease %d: %s", u.Lease, u.Reason)
	}
	return fmt.Sprintf("key %q: %s", u.Key, u.Reason)
}

// Unholdable lists, keys first in key order then leases, what keel cannot hold: a
// key one of whose versions hold refuses; a lease whose TTL is outside keel's
// [fsm.MinLeaseTTL, fsm.MaxLeaseTTL]; a key whose latest version is attached to such a
// lease or to a lease the snapshot does not hold. Lease IDs move as they are: etcd
// draws its own from the whole positive int64 range (its member ID in the high bits),
// and keel holds any positive ID (kv.ErrInvalidLeaseID).
func (d *Data) Unholdable(hold HoldFunc) []Unholdable {
	var out []Unholdable
	leases := make(map[int64]bool, len(d.Leases)) // ID → holdable
	var bad []Unholdable
	for _, l := range d.Leases {
		ok := l.TTL >= fsm.MinLeaseTTL/1000 && l.TTL <= fsm.MaxLeaseTTL/1000
		leases[l.ID] = ok
		if !ok {
			bad = append(bad, Unholdable{Lease: l.ID, Reason: fmt.Sprintf("TTL %d s outside keel's [%d, %d] s",
				l.TTL, fsm.MinLeaseTTL/1000, fsm.MaxLeaseTTL/1000)})
		}
	}
	for _, h := range d.Keys {
		if u, ok := unholdableKey(h, hold, leases); !ok {
			out = append(out, u)
		}
	}
	return append(out, bad...)
}

func unholdableKey(h fsm.KeyHistory, hold HoldFunc, leases map[int64]bool) (Unholdable, bool) {
	for _, v := range h.Versions {
		if hold == nil {
			break
		}
		if err := hold(h.Key, v.Value); err != nil {
			return Unholdable{Key: h.Key, Reason: err.Error()}, false
		}
	}
	if head := h.Versions[0]; head.CreateRevision != 0 && head.Lease != 0 {
		ok, found := leases[head.Lease]
		switch {
		case !found:
			return Unholdable{Key: h.Key, Lease: head.Lease, Reason: fmt.Sprintf("attached to lease %d, which the snapshot does not hold", head.Lease)}, false
		case !ok:
			return Unholdable{Key: h.Key, Lease: head.Lease, Reason: fmt.Sprintf("attached to lease %d, which keel cannot hold", head.Lease)}, false
		}
	}
	return Unholdable{}, true
}

// ImportOptions tune WriteKeel.
type ImportOptions struct {
	// Skip lists what to leave out (from Unholdable): each key with its whole history,
	// each lease. Anything Unholdable lists and Skip does not makes WriteKeel fail
	// with ErrUnholdable, before it writes a byte.
	Skip []Unholdable
	// Hold is the rule Skip was made with (see Unholdable).
	Hold HoldFunc
	// Carry are live keys of the cluster that the import keeps (keel's own records:
	// ACL, storage versions), each written as created at the snapshot's revision.
	// They must not be keys of the snapshot (the reserved prefix they live under is
	// one Hold refuses).
	Carry []fsm.KeyValue
}

// Summary says what WriteKeel wrote.
type Summary struct {
	Keys, Versions, Leases int // written
	SkippedKeys            int
	SkippedLeases          int
	Carried                int
	Revision, Compact      int64
}

// WriteKeel writes the snapshot's data to w as a keel snapshot stream
// (fsm.SnapshotWriter) at etcd's revision and compact revision. Leases keep their ID
// and granted TTL; the time left restarts, as etcd restarts it: the checkpointed
// remaining TTL when etcd kept one, the whole TTL otherwise.
func (d *Data) WriteKeel(w io.Writer, o ImportOptions) (Summary, error) {
	skipKey := make(map[string]bool)
	skipLease := make(map[int64]bool)
	for _, u := range o.Skip {
		if u.Key != nil {
			skipKey[string(u.Key)] = true
		} else {
			skipLease[u.Lease] = true
		}
	}
	for _, u := range d.Unholdable(o.Hold) {
		if (u.Key != nil && !skipKey[string(u.Key)]) || (u.Key == nil && !skipLease[u.Lease]) {
			return Summary{}, fmt.Errorf("%w: %s", ErrUnholdable, u)
		}
	}
	s := Summary{Revision: d.Revision, Compact: d.CompactRevision}
	if len(o.Carry) > 0 {
		s.Revision = max(s.Revision, 1)
	}
	kept := make([]fsm.KeyHistory, 0, len(d.Keys))
	for _, h := range d.Keys {
		if skipKey[string(h.Key)] {
			s.SkippedKeys++
			continue
		}
		kept = append(kept, h)
	}
	sw := fsm.NewSnapshotWriter(w, s.Revision, s.Compact)
	for _, h := range mergeCarry(kept, o.Carry, s.Revision) {
		if err := sw.Key(h); err != nil {
			return s, err
		}
		s.Keys++
		s.Versions += len(h.Versions)
	}
	s.Carried = len(o.Carry)
	var leases []fsm.Lease
	for _, l := range d.Leases {
		if skipLease[l.ID] {
			s.SkippedLeases++
			continue
		}
		rem := l.TTL
		if l.RemainingTTL > 0 && l.RemainingTTL < l.TTL {
			rem = l.RemainingTTL
		}
		leases = append(leases, fsm.Lease{ID: l.ID, TTL: l.TTL * 1000, Remaining: rem * 1000})
	}
	s.Leases = len(leases)
	return s, sw.Close(leases)
}

// mergeCarry returns keys with carry added, in key order, each carried
// key one version created at rev (without its lease: the snapshot's leases are etcd's).
func mergeCarry(keys []fsm.KeyHistory, carry []fsm.KeyValue, rev int64) []fsm.KeyHistory {
	if len(carry) == 0 {
		return keys
	}
	for _, kv := range carry {
		keys = append(keys, fsm.KeyHistory{Key: kv.Key, Versions: []fsm.KeyValue{{Key: kv.Key, Value: kv.Value,
			CreateRevision: rev, ModRevision: rev, Version: 1, Encoding: kv.Encoding}}})
	}
	slices.SortStableFunc(keys, func(a, b fsm.KeyHistory) int { return bytes.Compare(a.Key, b.Key) })
	return keys
}

// FromView is the Data of a keel view, as WriteKeel takes it: an import that reaches
// the cluster as a keel stream (the CLI converts etcd's file) is checked against the
// cluster's own rules and given the cluster's own records there. Lease times are
// whole seconds (an import's leases are etcd's).
func FromView(v *fsm.View) *Data {
	d := &Data{Revision: v.Revision(), CompactRevision: v.CompactRevision()}
	v.Histories(func(h fsm.KeyHistory) bool {
		h.Versions = slices.Clone(h.Versions)
		d.Keys = append(d.Keys, h)
		return true
	})
	for _, l := range v.Leases() {
		d.Leases = append(d.Leases, Lease{ID: l.ID, TTL: (l.TTL + 999) / 1000, RemainingTTL: (l.Remaining + 999) / 1000})
	}
	return d
}
