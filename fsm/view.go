package fsm

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"maps"
)

// MaxRangeSkip bounds how many keys a Range may visit beyond its limit (deleted keys,
// keys not yet created at the read revision) before it returns a short page with a
// resume key. A page therefore costs O((limit + MaxRangeSkip) · log n) at worst.
const MaxRangeSkip = 4096

// View is an immutable snapshot of the store at one applied index. It is safe for
// concurrent use and never blocks writers; KeyValues it returns alias shared memory.
type View struct {
	st state
}

// Revision is the view's latest revision.
func (v *View) Revision() int64 { return v.st.revision }

// CompactRevision is the oldest revision the view can still read.
func (v *View) CompactRevision() int64 { return v.st.compactRev }

// AppliedIndex is the Raft log index the view reflects.
func (v *View) AppliedIndex() uint64 { return v.st.applied }

// checkRev resolves rev (0 = latest) against the view's readable window.
func (v *View) checkRev(rev int64) (int64, error) {
	switch {
	case rev <= 0:
		return v.st.revision, nil
	case rev > v.st.revision:
		return 0, ErrFutureRevision
	case rev < v.st.compactRev:
		return 0, ErrCompacted
	}
	return rev, nil
}

// visible returns the version of a history visible at rev, if the key is live then.
func visible(h *version, rev int64) (*version, bool) {
	for ; h != nil; h = h.next {
		if h.mod <= rev {
			return h, !h.tombstone()
		}
	}
	return nil, false
}

// Get returns key as of rev (0 = latest): ErrKeyNotFound if absent then,
// ErrCompacted or ErrFutureRevision if rev is outside the readable window.
func (v *View) Get(key []byte, rev int64) (KeyValue, error) {
	rev, err := v.checkRev(rev)
	if err != nil {
		return KeyValue{}, err
	}
	e, ok := v.st.tree.Get(&entry{key: key})
	if !ok {
		return KeyValue{}, ErrKeyNotFound
	}
	ver, live := visible(e.hist, rev)
	if !live {
		return KeyValue{}, ErrKeyNotFound
	}
	return ver.keyValue(e.key), nil
}

// Range returns the keys of [start, end) live at rev (0 = latest), in key order, at most
// limit of them (limit <= 0: all). next is the key to resume from when the range may
// hold more, nil when it is exhausted. A page visits at most limit+MaxRangeSkip keys,
// so it may come back short (even empty) with a non-nil next.
func (v *View) Range(start, end []byte, rev int64, limit int) (kvs []KeyValue, next []byte, err error) {
	rev, err = v.checkRev(rev)
	if err != nil {
		return nil, nil, err
	}
	visited := 0
	ascendTree(v.st.tree, start, end, func(e *entry) bool {
		if limit > 0 && (len(kvs) == limit || visited >= limit+MaxRangeSkip) {
			next = e.key
			return false
		}
		visited++
		if ver, live := visible(e.hist, rev); live {
			kvs = append(kvs, ver.keyValue(e.key))
		}
		return true
	})
	return kvs, next, nil
}

// Len counts the live keys at the view's revision, in O(1) (count.go).
func (v *View) Len() int { return v.st.tree.Count() }

// Hash digests the logical state: revisions, cluster metadata and every live key with
// its metadata. Replicas that applied the same log agree on it, whatever garbage their
// compactors have reclaimed so far.
func (v *View) Hash() uint64 {
	h := fnv.New64a()
	var buf [binary.MaxVarintLen64 * 4]byte
	b := binary.AppendVarint(buf[:0], v.st.revision)
	b = binary.AppendVarint(b, v.st.compactRev)
	h.Write(b)
	h.Write([]byte(v.st.clusterID))
	h.Write(v.st.secret)
	v.st.tree.Ascend(func(e *entry) bool {
		if e.hist == nil || e.hist.tombstone() {
			return true
		}
		b := binary.AppendUvarint(buf[:0], uint64(len(e.key)))
		h.Write(b)
		h.Write(e.key)
		b = binary.AppendUvarint(buf[:0], uint64(len(e.hist.value)))
		b = binary.AppendVarint(b, e.hist.create)
		b = binary.AppendVarint(b, e.hist.mod)
		b = binary.AppendVarint(b, e.hist.version)
		h.Write(b)
		h.Write(e.hist.value)
		if e.hist.encoding != "" {
			h.Write([]byte(e.hist.encoding))
		}
		if e.hist.lease != 0 {
			h.Write(binary.AppendVarint(buf[:0], e.hist.lease))
		}
		return true
	})
	v.st.ls.leases.Ascend(func(l *Lease) bool {
		b := binary.AppendVarint(buf[:0], l.ID)
		b = binary.AppendVarint(b, l.TTL)
		b = binary.AppendVarint(b, l.Remaining)
		h.Write(binary.AppendUvarint(b, l.CheckpointIndex))
		return true
	})
	return h.Sum64()
}

// Encodings returns how many live keys carry each encoding tag at the view's revision
// (see Op.Encoding); tags no live key carries are absent. The map is the caller's.
// Counts are kept as writes apply, so this is O(number of tags), not a scan.
func (v *View) Encodings() map[string]int64 {
	return maps.Clone(v.st.encodings)
}

// ascendTree visits the entries of [start, end) in t; an empty end means no upper bound.
func ascendTree(t *keyTree, start, end []byte, fn func(*entry) bool) {
	iter := func(e *entry) bool {
		if len(end) > 0 && bytes.Compare(e.key, end) >= 0 {
			return false
		}
		return fn(e)
	}
	if len(start) == 0 {
		t.Ascend(iter)
		return
	}
	t.AscendGreaterOrEqual(&entry{key: start}, iter)
}
