package fsm

import (
	"bytes"

	"github.com/google/btree"
)

// Count returns how many keys of [key, end) are live at rev (0 = latest), with
// RangeWith's bounds: end nil counts key alone, an empty non-nil end every key >= key,
// an end at or before key nothing. ErrCompacted or ErrFutureRevision if rev is outside
// the readable window.
func (v *View) Count(key, end []byte, rev int64) (int64, error) {
	rev, err := v.checkRev(rev)
	if err != nil {
		return 0, err
	}
	return countLive(v.st.tree, key, end, rev), nil
}

// countLive counts the keys of [key, end) live at rev in t.
func countLive(t *btree.BTreeG[*entry], key, end []byte, rev int64) int64 {
	return countWalk(t, key, end, rev)
}

// countWalk counts by visiting every key of the range: O(keys in the range).
func countWalk(t *btree.BTreeG[*entry], key, end []byte, rev int64) int64 {
	if end != nil && len(end) > 0 && bytes.Compare(end, key) <= 0 {
		return 0
	}
	n := int64(0)
	visitLive(t, key, end, rev, func(*entry, *version) bool { n++; return true })
	return n
}
