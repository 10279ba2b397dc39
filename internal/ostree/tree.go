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
	"math/bits"
	"sort"
)

// MaxDegree is the largest degree a Tree takes: a node of degree d holds up to 2d-1
// items, and a node's live bits are one uint64.
const MaxDegree = 32

// LessFunc orders items: a strict weak ordering, a < b.
type LessFunc[T any] func(a, b T) bool

// Measure says whether item counts and gives its stamp. It must be a function of the
// item alone: an item's measure must not change while the item is in a tree (replace
// the item instead).
type Measure[T any] func(item T) (counts bool, stamp int64)

// Tree is an order-statistic copy-on-write B-tree (see the package comment). Writes
// are not safe for concurrent use; reads are, with each other and with writes to
// clones of the tree.
type Tree[T any] struct {
	degree int
	length int
	root   *node[T]
	cow    *cowContext[T]
}

// cowContext marks node ownership as google/btree's copyOnWriteContext does: a tree
// may modify a node in place only if the node carries the tree's context.
type cowContext[T any] struct {
	less    LessFunc[T]
	measure Measure[T]
}

// New returns an empty tree of the given degree (2..MaxDegree).
func New[T any](degree int, less LessFunc[T], measure Measure[T]) *Tree[T] {
	if degree <= 1 || degree > MaxDegree {
		panic("ostree: bad degree")
	}
	return &Tree[T]{degree: degree, cow: &cowContext[T]{less: less, measure: measure}}
}

// node is a node of the tree: either len(children) == 0, or len(children) ==
// len(items)+1. Its aggregates cover its subtree (see the package comment).
type node[T any] struct {
	items    []T
	stamps   []int64 // stamps[i] is items[i]'s stamp: a scan for stamps reads no item
	children []*node[T]
	cstamps  []int64 // cstamps[i] is children[i].stamp: a scan for stamps reads no child it skips
	cow      *cowContext[T]
	live     uint64 // bit i: items[i] counts
	count    int    // counted items in the subtree
	stamp    int64  // >= every stamp in the subtree
}

// meta is an item's measure as its node keeps it.
type meta struct {
	live  bool
	stamp int64
}

func (c *cowContext[T]) meta(item T) meta {
	live, stamp := c.measure(item)
	return meta{live, stamp}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// low is the mask of bits below i (i <= 64).
func low(i int) uint64 { return uint64(1)<<uint(i) - 1 }

func (n *node[T]) liveAt(i int) bool { return n.live>>uint(i)&1 == 1 }

func (n *node[T]) metaAt(i int) meta { return meta{n.liveAt(i), n.stamps[i]} }

// insertItem inserts item at index i, shifting the live bits and stamps with it.
func (n *node[T]) insertItem(i int, item T, m meta) {
	var zero T
	n.items = append(n.items, zero)
	copy(n.items[i+1:], n.items[i:])
	n.items[i] = item
	n.stamps = append(n.stamps, 0)
	copy(n.stamps[i+1:], n.stamps[i:])
	n.stamps[i] = m.stamp
	n.live = n.live&low(i) | (n.live&^low(i))<<1 | uint64(b2i(m.live))<<uint(i)
}

// removeItem removes the item at index i and returns it with its measure.
func (n *node[T]) removeItem(i int) (T, meta) {
	item, m := n.items[i], n.metaAt(i)
	copy(n.items[i:], n.items[i+1:])
	var zero T
	n.items[len(n.items)-1] = zero
	n.items = n.items[:len(n.items)-1]
	copy(n.stamps[i:], n.stamps[i+1:])
	n.stamps = n.stamps[:len(n.stamps)-1]
	n.live = n.live&low(i) | (n.live>>1)&^low(i)
	return item, m
}

func (n *node[T]) popItem() (T, meta) { return n.removeItem(len(n.items) - 1) }

func (n *node[T]) setItem(i int, item T, m meta) {
	n.items[i] = item
	n.stamps[i] = m.stamp
	n.live = n.live&^(1<<uint(i)) | uint64(b2i(m.live))<<uint(i)
}

// truncateItems keeps the first i items.
func (n *node[T]) truncateItems(i int) {
	var zero T
	for j := i; j < len(n.items); j++ {
		n.items[j] = zero
	}
	n.items = n.items[:i]
	n.stamps = n.stamps[:i]
	n.live &= low(i)
}

// appendItems appends src's items[from:] with their live bits and stamps.
func (n *node[T]) appendItems(src *node[T], from int) {
	n.live |= (src.live >> uint(from)) << uint(len(n.items))
	n.items = append(n.items, src.items[from:]...)
	n.stamps = append(n.stamps, src.stamps[from:]...)
}

func (n *node[T]) find(item T) (int, bool) {
	less := n.cow.less
	i := sort.Search(len(n.items), func(i int) bool { return less(item, n.items[i]) })
	if i > 0 && !less(n.items[i-1], item) {
		return i - 1, true
	}
	return i, false
}

// recount sets count from the live bits and the children.
func (n *node[T]) recount() {
	n.count = bits.OnesCount64(n.live)
	for _, c := range n.children {
		n.count += c.count
	}
}

// restamp sets stamp exactly from the items and the children's bounds.
func (n *node[T]) restamp() {
	s := int64(0)
	for _, st := range n.stamps {
		s = max(s, st)
	}
	for _, st := range n.cstamps {
		s = max(s, st)
	}
	n.stamp = s
}

// syncChildren copies the children's stamp bounds into cstamps, after a reshaping.
func (n *node[T]) syncChildren() {
	n.cstamps = n.cstamps[:0]
	for _, c := range n.children {
		n.cstamps = append(n.cstamps, c.stamp)
	}
}

// reaggregate recomputes every aggregate of n from its items and children, after
// items and children moved between nodes.
func (n *node[T]) reaggregate() {
	n.syncChildren()
	n.recount()
	n.restamp()
}

func (n *node[T]) mutableFor(cow *cowContext[T]) *node[T] {
	if n.cow == cow {
		return n
	}
	out := &node[T]{cow: cow, live: n.live, count: n.count, stamp: n.stamp}
	out.items = make([]T, len(n.items), cap(n.items))
	copy(out.items, n.items)
	out.stamps = make([]int64, len(n.stamps), cap(n.items))
	copy(out.stamps, n.stamps)
	if len(n.children) > 0 {
		out.children = make([]*node[T], len(n.children), cap(n.children))
		copy(out.children, n.children)
		out.cstamps = make([]int64, len(n.cstamps), cap(n.children))
		copy(out.cstamps, n.cstamps)
	}
	return out
}

func (n *node[T]) mutableChild(i int) *node[T] {
	c := n.children[i].mutableFor(n.cow)
	n.children[i] = c
	return c
}

// split splits n at index i: n keeps the items before i, the item at i is returned
// with its live bit, and a new node holds the items and children after it. Both
// nodes' aggregates are exact afterwards.
func (n *node[T]) split(i int) (T, meta, *node[T]) {
	item, m := n.items[i], n.metaAt(i)
	next := &node[T]{cow: n.cow}
	next.appendItems(n, i+1)
	n.truncateItems(i)
	if len(n.children) > 0 {
		next.children = append(next.children, n.children[i+1:]...)
		next.cstamps = append(next.cstamps, n.cstamps[i+1:]...)
		for j := i + 1; j < len(n.children); j++ {
			n.children[j] = nil
		}
		n.children = n.children[:i+1]
		n.cstamps = n.cstamps[:i+1]
	}
	next.recount()
	n.count -= next.count + b2i(m.live)
	next.restamp()
	n.restamp()
	return item, m, next
}

// maybeSplitChild splits child i if it is full and reports whether it did. n's own
// aggregates do not change: its subtree holds the same items.
func (n *node[T]) maybeSplitChild(i, maxItems int) bool {
	if len(n.children[i].items) < maxItems {
		return false
	}
	first := n.mutableChild(i)
	item, m, second := first.split(maxItems / 2)
	n.insertItem(i, item, m)
	n.children = append(n.children, nil)
	copy(n.children[i+2:], n.children[i+1:])
	n.children[i+1] = second
	n.cstamps = append(n.cstamps, 0)
	copy(n.cstamps[i+2:], n.cstamps[i+1:])
	n.cstamps[i], n.cstamps[i+1] = first.stamp, second.stamp
	return true
}

// insert inserts item (whose measure is m) into n's subtree, keeping every node at
// most maxItems items, and returns the item it replaced, if any, with its live bit.
func (n *node[T]) insert(item T, m meta, maxItems int) (out T, found, outLive bool) {
	n.stamp = max(n.stamp, m.stamp)
	i, found := n.find(item)
	if !found && len(n.children) > 0 && n.maybeSplitChild(i, maxItems) {
		switch inTree := n.items[i]; {
		case n.cow.less(item, inTree):
		case n.cow.less(inTree, item):
			i++
		default:
			found = true
		}
	}
	switch {
	case found:
		out, outLive = n.items[i], n.liveAt(i)
		n.setItem(i, item, m)
	case len(n.children) == 0:
		n.insertItem(i, item, m)
	default:
		child := n.mutableChild(i)
		out, found, outLive = child.insert(item, m, maxItems)
		n.cstamps[i] = child.stamp
	}
	n.count += b2i(m.live) - b2i(found && outLive)
	return out, found, outLive
}

func (n *node[T]) get(key T) (T, bool) {
	for {
		i, found := n.find(key)
		if found {
			return n.items[i], true
		}
		if len(n.children) == 0 {
			var zero T
			return zero, false
		}
		n = n.children[i]
	}
}

// remove removes item (or, with max set, the largest item) from n's subtree and
// returns it with its live bit.
func (n *node[T]) remove(item T, max bool, minItems int) (out T, found, outLive bool) {
	var i int
	if max {
		if len(n.children) == 0 {
			out, m := n.popItem()
			n.count -= b2i(m.live)
			return out, true, m.live
		}
		i = len(n.items)
	} else {
		i, found = n.find(item)
		if len(n.children) == 0 {
			if found {
				var m meta
				out, m = n.removeItem(i)
				outLive = m.live
				n.count -= b2i(outLive)
			}
			return out, found, outLive
		}
	}
	if len(n.children[i].items) <= minItems {
		n.growChild(i, minItems)
		return n.remove(item, max, minItems) // which accounts for the removal itself
	}
	child := n.mutableChild(i)
	if found {
		// Item i leaves; its predecessor, the largest item of child i, takes its place.
		out, outLive = n.items[i], n.liveAt(i)
		var zero T
		pred, _, _ := child.remove(zero, true, minItems)
		n.setItem(i, pred, n.cow.meta(pred))
		n.cstamps[i] = child.stamp
		n.count -= b2i(outLive)
		return out, true, outLive
	}
	out, found, outLive = child.remove(item, max, minItems)
	n.count -= b2i(found && outLive)
	n.cstamps[i] = child.stamp
	return out, found, outLive
}

// growChild gives child i more than minItems items, by stealing from a sibling or by
// merging with one, as google/btree's growChildAndRemove does. n's subtree keeps the
// same items, so only the children's aggregates move.
func (n *node[T]) growChild(i, minItems int) {
	switch {
	case i > 0 && len(n.children[i-1].items) > minItems:
		child, from := n.mutableChild(i), n.mutableChild(i-1)
		stolen, m := from.popItem()
		child.insertItem(0, n.items[i-1], n.metaAt(i-1))
		n.setItem(i-1, stolen, m)
		if len(from.children) > 0 {
			c := from.children[len(from.children)-1]
			from.children[len(from.children)-1] = nil
			from.children = from.children[:len(from.children)-1]
			child.children = append([]*node[T]{c}, child.children...)
		}
		child.reaggregate()
		from.reaggregate()
	case i < len(n.items) && len(n.children[i+1].items) > minItems:
		child, from := n.mutableChild(i), n.mutableChild(i+1)
		stolen, m := from.removeItem(0)
		child.insertItem(len(child.items), n.items[i], n.metaAt(i))
		n.setItem(i, stolen, m)
		if len(from.children) > 0 {
			child.children = append(child.children, from.children[0])
			copy(from.children, from.children[1:])
			from.children[len(from.children)-1] = nil
			from.children = from.children[:len(from.children)-1]
		}
		child.reaggregate()
		from.reaggregate()
	default:
		if i >= len(n.items) {
			i--
		}
		child := n.mutableChild(i)
		mergeItem, m := n.removeItem(i)
		merged := n.children[i+1]
		copy(n.children[i+1:], n.children[i+2:])
		n.children[len(n.children)-1] = nil
		n.children = n.children[:len(n.children)-1]
		child.insertItem(len(child.items), mergeItem, m)
		child.appendItems(merged, 0)
		child.children = append(child.children, merged.children...)
		child.cstamps = append(child.cstamps, merged.cstamps...)
		child.count += b2i(m.live) + merged.count
		child.stamp = max(child.stamp, merged.stamp, m.stamp)
	}
	n.syncChildren()
}

// Clone returns a copy of t in O(1): t and the copy share every node, and each copies
// the nodes on a write's path before it modifies them, so neither sees the other's
// writes. Clone must not run concurrently with a write to t.
func (t *Tree[T]) Clone() *Tree[T] {
	cow1, cow2 := *t.cow, *t.cow
	out := *t
	t.cow = &cow1
	out.cow = &cow2
	return &out
}

func (t *Tree[T]) maxItems() int { return t.degree*2 - 1 }
func (t *Tree[T]) minItems() int { return t.degree - 1 }

// ReplaceOrInsert adds item to the tree, replacing and returning an equal item if
// there is one.
func (t *Tree[T]) ReplaceOrInsert(item T) (T, bool) {
	m := t.cow.meta(item)
	if t.root == nil {
		t.root = &node[T]{cow: t.cow}
		t.root.insertItem(0, item, m)
		t.root.count, t.root.stamp = b2i(m.live), m.stamp
		t.length++
		var zero T
		return zero, false
	}
	t.root = t.root.mutableFor(t.cow)
	if len(t.root.items) >= t.maxItems() {
		item2, m2, second := t.root.split(t.maxItems() / 2)
		old := t.root
		t.root = &node[T]{cow: t.cow, children: []*node[T]{old, second}, cstamps: []int64{old.stamp, second.stamp}}
		t.root.insertItem(0, item2, m2)
		t.root.recount()
		t.root.restamp()
	}
	out, found, _ := t.root.insert(item, m, t.maxItems())
	if !found {
		t.length++
	}
	return out, found
}

// Delete removes the item equal to item and returns it, if there is one.
func (t *Tree[T]) Delete(item T) (T, bool) {
	if t.root == nil || len(t.root.items) == 0 {
		var zero T
		return zero, false
	}
	t.root = t.root.mutableFor(t.cow)
	out, found, _ := t.root.remove(item, false, t.minItems())
	if len(t.root.items) == 0 && len(t.root.children) > 0 {
		t.root = t.root.children[0]
	}
	if found {
		t.length--
	}
	return out, found
}

// Get returns the item equal to key, if there is one.
func (t *Tree[T]) Get(key T) (T, bool) {
	if t.root == nil {
		var zero T
		return zero, false
	}
	return t.root.get(key)
}

// Len is the number of items in the tree.
func (t *Tree[T]) Len() int { return t.length }
