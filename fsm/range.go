package fsm

import (
	"bytes"
	"fmt"
	"math"
	"sort"
)

// RangeResult is the answer of View.RangeWith, with the fields of etcd's RangeResponse.
type RangeResult struct {
	KVs   []KeyValue
	Count int64 // RangeOptions.WithCount or CountOnly: keys in the range, else 0
	More  bool  // the limit cut the keys that passed the filters
	// Revision is the view's revision, what etcd puts in the response header (not the
	// revision read at).
	Revision int64
}

// RangeWith reads [key, end) as etcd's Range does (server/etcdserver/txn/range.go
// executeRange): end nil reads key alone, an empty non-nil end every key >= key (etcd's
// "\x00" range end), an end at or before key nothing. limit <= 0 is no limit. See
// RangeOptions for the options; o.Revision <= 0 reads the view's revision. Unlike Range
// it does not page: it visits the whole range when it filters or sorts. A count does
// not visit it: a first page with its count costs O(limit + log n) (count.go).
func (v *View) RangeWith(key, end []byte, limit int64, o RangeOptions) (RangeResult, error) {
	if err := o.validate(); err != nil {
		return RangeResult{}, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	rev, err := v.checkRev(o.Revision)
	if err != nil {
		return RangeResult{}, err
	}
	res := rangeTree(v.st.tree, key, end, rev, max(limit, 0), o)
	res.Revision = v.st.revision
	return res, nil
}

func (o *RangeOptions) validate() error {
	if o.SortOrder > SortDescend {
		return fmt.Errorf("unknown sort order %d", o.SortOrder)
	}
	if o.SortTarget > SortByValue {
		return fmt.Errorf("unknown sort target %d", o.SortTarget)
	}
	return nil
}

// defaultOrdering is etcd's txn.IsDefaultOrdering: the index's key order will do.
func defaultOrdering(t SortTarget, o SortOrder) bool {
	return o == SortNone || (t == SortByKey && o == SortAscend)
}

func (o *RangeOptions) hasRevisionFilters() bool {
	return o.MinModRevision != 0 || o.MaxModRevision != 0 || o.MinCreateRevision != 0 || o.MaxCreateRevision != 0
}

// visitLive calls fn for each key of [key, end) live at rev, in key order (end nil: key
// alone; empty: no upper bound).
func visitLive(t *keyTree, key, end []byte, rev int64, fn func(*entry, *version) bool) {
	if end == nil {
		if e, ok := t.Get(&entry{key: key}); ok {
			if ver, live := visible(e.hist, rev); live {
				fn(e, ver)
			}
		}
		return
	}
	if len(end) > 0 && bytes.Compare(end, key) <= 0 {
		return
	}
	ascendTree(t, key, end, func(e *entry) bool {
		if ver, live := visible(e.hist, rev); live {
			return fn(e, ver)
		}
		return true
	})
}

// rangeTree answers a range of t at rev step by step as etcd's executeRange does:
// fetch (limit+1 keys, or all when sorting or filtering: rangeLimit), count (from the
// tree's ranks when the fetch stopped early, count.go, not by walking on), filter
// (filterRangeResults), sort (sortRangeResults), cut to limit and set More, drop values
// (asembleRangeResponse). Each step's quirks are etcd's, so answers match key for key.
func rangeTree(t *keyTree, key, end []byte, rev, limit int64, o RangeOptions) RangeResult {
	var res RangeResult
	if o.CountOnly {
		res.Count = countLive(t, key, end, rev)
		return res
	}
	fetch := limit
	if !defaultOrdering(o.SortTarget, o.SortOrder) || o.hasRevisionFilters() {
		fetch = 0
	}
	if fetch > 0 && fetch < math.MaxInt64 {
		fetch++
	}
	// etcd 3.7 serves keys_only from the index unless it sorts by value: no lease.
	fromIndex := o.KeysOnly && o.SortTarget != SortByValue
	visitLive(t, key, end, rev, func(e *entry, ver *version) bool {
		if fetch > 0 && int64(len(res.KVs)) >= fetch {
			return false
		}
		kv := ver.keyValue(e.key)
		if fromIndex {
			kv.Lease = 0
		}
		res.KVs = append(res.KVs, kv)
		return true
	})
	switch {
	case !o.WithCount:
	case fetch > 0 && int64(len(res.KVs)) >= fetch:
		// The page stopped early: count the rest from the tree (count.go), in
		// O(log n) instead of a walk of the whole range as etcd does.
		res.Count = countLive(t, key, end, rev)
	default:
		res.Count = int64(len(res.KVs)) // every key of the range was fetched
	}
	res.KVs = filterKVs(res.KVs, &o)
	sortKVs(res.KVs, o.SortTarget, o.SortOrder)
	if limit > 0 && int64(len(res.KVs)) > limit {
		res.KVs = res.KVs[:limit]
		res.More = true
	}
	if o.KeysOnly {
		for i := range res.KVs {
			res.KVs[i].Value = nil
		}
	}
	return res
}

// filterKVs drops, in place, the keys outside the revision filters.
func filterKVs(kvs []KeyValue, o *RangeOptions) []KeyValue {
	if !o.hasRevisionFilters() {
		return kvs
	}
	out := kvs[:0]
	for _, kv := range kvs {
		switch {
		case o.MaxModRevision != 0 && kv.ModRevision > o.MaxModRevision:
		case o.MinModRevision != 0 && kv.ModRevision < o.MinModRevision:
		case o.MaxCreateRevision != 0 && kv.CreateRevision > o.MaxCreateRevision:
		case o.MinCreateRevision != 0 && kv.CreateRevision < o.MinCreateRevision:
		default:
			out = append(out, kv)
		}
	}
	return out
}

// sortKVs orders kvs as etcd's sortRangeResults: a target other than the key with no
// order sorts ascending; the index's key order is kept when it is what was asked. It
// uses sort.Sort (not stable) with etcd's Less functions on the same key-ordered input,
// so keys with equal sort values come out in the order etcd gives them.
func sortKVs(kvs []KeyValue, target SortTarget, order SortOrder) {
	if target != SortByKey && order == SortNone {
		order = SortAscend
	}
	if defaultOrdering(target, order) {
		return
	}
	s := kvSorter{kvs: kvs, target: target}
	if order == SortDescend {
		sort.Sort(sort.Reverse(s))
		return
	}
	sort.Sort(s)
}

type kvSorter struct {
	kvs    []KeyValue
	target SortTarget
}

func (s kvSorter) Len() int      { return len(s.kvs) }
func (s kvSorter) Swap(i, j int) { s.kvs[i], s.kvs[j] = s.kvs[j], s.kvs[i] }

// Less is etcd's kvSortBy* Less, subtractions included.
func (s kvSorter) Less(i, j int) bool {
	a, b := &s.kvs[i], &s.kvs[j]
	switch s.target {
	case SortByVersion:
		return a.Version-b.Version < 0
	case SortByCreate:
		return a.CreateRevision-b.CreateRevision < 0
	case SortByMod:
		return a.ModRevision-b.ModRevision < 0
	case SortByValue:
		return bytes.Compare(a.Value, b.Value) < 0
	}
	return bytes.Compare(a.Key, b.Key) < 0
}
