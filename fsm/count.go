package fsm

import "bytes"

// Counting a range without visiting it. The keyspace tree (keyTree, internal/ostree)
// keeps, in every node, how many keys of its subtree are live at the latest revision
// and a bound on the newest revision written in its subtree. A count at the latest
// revision is two ranks: CountLess(end) − CountLess(key). A count at an older revision
// rev differs from it only by the keys whose liveness changed after rev, and each of
// those has its newest version after rev; the tree finds them by skipping every
// subtree written to at or before rev, and for each one found
//
//	count(rev) = count(latest) + [live at rev] − [live now].
//
// Worked example: keys a b c d, each put at revision 2; delete b at 5; put e at 6.
// At the latest revision (6) [a, z) counts a c d e = 4 from the ranks. At revision 4
// the tree visits the keys with a version after 4, b (tombstone 5) and e (6): b was
// live at 4, is not now: +1; e was not live at 4, is now: −1; 4 + 1 − 1 = 4 (a b c d).
//
// Cost: O(log n) at the latest revision; at an older one, O(log n) plus the keys of
// the range written after it, each found in O(log n) — never more than visiting the
// range. See doc.go for why the second term is small where it matters (paged lists
// read at their first page's revision) and for the numbers.

// Count returns how many keys of [key, end) are live at rev (0 = latest), with
// RangeWith's bounds: end nil counts key alone, an empty non-nil end every key >= key,
// an end at or before key nothing. ErrCompacted or ErrFutureRevision if rev is outside
// the readable window. It does not visit the range (see above).
func (v *View) Count(key, end []byte, rev int64) (int64, error) {
	rev, err := v.checkRev(rev)
	if err != nil {
		return 0, err
	}
	return countLive(v.st.tree, key, end, rev), nil
}

// countLive counts the keys of [key, end) live at rev in t.
func countLive(t *keyTree, key, end []byte, rev int64) int64 {
	if end == nil {
		if e, ok := t.Get(&entry{key: key}); ok {
			if _, live := visible(e.hist, rev); live {
				return 1
			}
		}
		return 0
	}
	lo := &entry{key: key}
	var hi *entry
	var n int
	if len(end) == 0 {
		n = t.Count() - t.CountLess(lo)
	} else {
		if bytes.Compare(end, key) <= 0 {
			return 0
		}
		hi = &entry{key: end}
		n = t.CountLess(hi) - t.CountLess(lo)
	}
	if rev < t.Stamp() {
		n += changedSince(t, lo, hi, rev)
	}
	return int64(n)
}

// changedSince is count(rev) − count(latest) over [lo, hi) (hi nil: no bound): it
// visits the keys written after rev only.
func changedSince(t *keyTree, lo, hi *entry, rev int64) int {
	var bound **entry
	if hi != nil {
		bound = &hi
	}
	d := 0
	t.AscendStampAbove(lo, bound, rev, func(e *entry) bool {
		_, then := visible(e.hist, rev)
		now, _ := entryMeasure(e)
		switch {
		case then && !now:
			d++
		case now && !then:
			d--
		}
		return true
	})
	return d
}
