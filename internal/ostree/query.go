// Copyright 2014-2022 Google Inc.
// Copyright 2026 the keel authors: the counting augmentation (see doc.go).
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package ostree

import (
	"fmt"
	"math/bits"
)

// Iterator is called for each item of an iteration until it returns false.
type Iterator[T any] func(item T) bool

// Ascend calls fn for every item in order, until fn returns false.
func (t *Tree[T]) Ascend(fn Iterator[T]) {
	if t.root != nil {
		t.root.ascend(nil, nil, fn)
	}
}

// AscendGreaterOrEqual calls fn for every item >= pivot in order, until fn returns
// false.
func (t *Tree[T]) AscendGreaterOrEqual(pivot T, fn Iterator[T]) {
	if t.root != nil {
		t.root.ascend(&pivot, nil, fn)
	}
}

// AscendRange calls fn for every item in [lo, hi) in order, until fn returns false.
func (t *Tree[T]) AscendRange(lo, hi T, fn Iterator[T]) {
	if t.root != nil {
		t.root.ascend(&lo, &hi, fn)
	}
}

// ascend visits the items of n's subtree in [lo, hi) (nil: unbounded); false means
// fn or the upper bound stopped it.
func (n *node[T]) ascend(lo, hi *T, fn Iterator[T]) bool {
	i := 0
	if lo != nil {
		i, _ = n.find(*lo)
	}
	for ; i < len(n.items); i++ {
		if len(n.children) > 0 && !n.children[i].ascend(lo, hi, fn) {
			return false
		}
		if hi != nil && !n.cow.less(n.items[i], *hi) {
			return false
		}
		if !fn(n.items[i]) {
			return false
		}
	}
	if len(n.children) > 0 {
		return n.children[len(n.children)-1].ascend(lo, hi, fn)
	}
	return true
}

// Count is how many items of the tree count (see Measure), in O(1).
func (t *Tree[T]) Count() int {
	if t.root == nil {
		return 0
	}
	return t.root.count
}

// CountLess is how many items below pivot count, in O(degree · depth): on each level
// of the search path one popcount of the node's live bits and the counts of the
// children left of the path.
func (t *Tree[T]) CountLess(pivot T) int {
	c := 0
	for n := t.root; n != nil; {
		i, found := n.find(pivot)
		c += bits.OnesCount64(n.live & low(i))
		if len(n.children) == 0 {
			break
		}
		if found {
			i++ // children[i] is below items[i] == pivot too
		}
		for _, ch := range n.children[:i] {
			c += ch.count
		}
		if found {
			break
		}
		n = n.children[i]
	}
	return c
}

// Stamp is a bound at or above every item's stamp (0 for an empty tree).
func (t *Tree[T]) Stamp() int64 {
	if t.root == nil {
		return 0
	}
	return t.root.stamp
}

// AscendStampAbove calls fn, in order, for every item of [lo, hi) (hi nil: unbounded)
// whose stamp is above stamp, until fn returns false. It skips every subtree whose
// stamp bound is at or below stamp, so it costs O(k · degree · depth) for k such items
// (and the subtrees whose bounds are stale; see the package comment).
func (t *Tree[T]) AscendStampAbove(lo T, hi *T, stamp int64, fn Iterator[T]) {
	if t.root != nil {
		t.root.ascendStamp(lo, hi, stamp, fn)
	}
}

func (n *node[T]) ascendStamp(lo T, hi *T, stamp int64, fn Iterator[T]) bool {
	if n.stamp <= stamp {
		return true
	}
	i, _ := n.find(lo)
	for ; i <= len(n.items); i++ {
		if len(n.children) > 0 && n.cstamps[i] > stamp && !n.children[i].ascendStamp(lo, hi, stamp, fn) {
			return false
		}
		if i == len(n.items) {
			break
		}
		it := n.items[i]
		if hi != nil && !n.cow.less(it, *hi) {
			return false
		}
		if n.stamps[i] > stamp && !fn(it) {
			return false
		}
	}
	return true
}

// Verify checks every node's order, shape and aggregates against its items, in O(n);
// for tests.
func (t *Tree[T]) Verify() error {
	if t.root == nil {
		return nil
	}
	n, err := t.root.verify(t.maxItems())
	if err == nil && n != t.length {
		err = fmt.Errorf("ostree: length %d, %d items", t.length, n)
	}
	return err
}

func (n *node[T]) verify(maxItems int) (int, error) {
	if len(n.items) > maxItems || (len(n.children) > 0 && len(n.children) != len(n.items)+1) {
		return 0, fmt.Errorf("ostree: node of %d items and %d children", len(n.items), len(n.children))
	}
	if n.live&^low(len(n.items)) != 0 {
		return 0, fmt.Errorf("ostree: live bits %b beyond %d items", n.live, len(n.items))
	}
	if len(n.stamps) != len(n.items) {
		return 0, fmt.Errorf("ostree: %d stamps for %d items", len(n.stamps), len(n.items))
	}
	items, count, stamp := len(n.items), 0, int64(0)
	for i, it := range n.items {
		live, st := n.cow.measure(it)
		if live != n.liveAt(i) || st != n.stamps[i] {
			return 0, fmt.Errorf("ostree: item %d: live bit %v stamp %d, measure %v %d", i, n.liveAt(i), n.stamps[i], live, st)
		}
		if i > 0 && !n.cow.less(n.items[i-1], it) {
			return 0, fmt.Errorf("ostree: items %d and %d out of order", i-1, i)
		}
		count += b2i(live)
		stamp = max(stamp, st)
	}
	if len(n.cstamps) != len(n.children) {
		return 0, fmt.Errorf("ostree: %d child stamps for %d children", len(n.cstamps), len(n.children))
	}
	for i, c := range n.children {
		if n.cstamps[i] != c.stamp {
			return 0, fmt.Errorf("ostree: child %d: stamp %d, its bound %d", i, n.cstamps[i], c.stamp)
		}
		k, err := c.verify(maxItems)
		if err != nil {
			return 0, err
		}
		items += k
		count += c.count
		stamp = max(stamp, c.stamp)
	}
	if count != n.count || stamp > n.stamp {
		return 0, fmt.Errorf("ostree: node count %d stamp %d, subtree count %d stamp %d", n.count, n.stamp, count, stamp)
	}
	return items, nil
}
