// Package ostree is an order-statistic, copy-on-write B-tree: google/btree's generic
// BTreeG (v1.1.3, Apache 2.0, Copyright 2014-2022 Google Inc.), cut down to what
// package fsm uses and augmented so that a range can be counted without visiting it.
//
// What it adds. A Measure, given when the tree is made, says of each item whether it
// counts and gives it a stamp (fsm: "the key is live at the latest revision" and "the
// revision of the key's newest version"). Every node keeps
//
//   - live: a bitmask, bit i set when items[i] counts (a node holds at most 63 items,
//     which is why the degree is at most 32),
//   - stamps: items[i]'s stamp at stamps[i], beside the items,
//   - count: how many items of its subtree count,
//   - stamp: a bound at or above every stamp in its subtree, and
//   - cstamps: children[i]'s stamp bound at cstamps[i], beside the children,
//
// so CountLess adds up one mask's popcount and the counts of the children left of the
// search path on each level, O(degree · depth), and AscendStampAbove enters only the
// subtrees whose stamp bound exceeds its argument, deciding from the arrays without
// touching an item or a child it skips. (Items and children are pointers: reading each
// one's stamp through it cost a cache miss apiece — 9 µs per changed key found at 1M
// keys with both, 1.7 µs with the items' stamps beside them, about 1 µs with both —
// for 8 bytes a key and a 32nd of that per child.)
//
// The aggregates are facts about the items alone, kept on the path that a write copies
// anyway: an insert or replace adjusts count and raises stamp on each node it descends
// through, a split or a steal recomputes the nodes it reshapes from their masks,
// stamps and children, a merge adds. A removal lowers counts
// but leaves the stamp bounds where they were: a bound may then sit above every stamp
// it covers, which costs AscendStampAbove a visit, never a wrong answer (fsm removes
// a key only when its every version is below the compact revision, so its stamp is
// below every revision a reader may ask about, and the stale bound prunes nothing
// that the exact one would not).
//
// Copy-on-write is google/btree's: Clone is O(1) and shares every node, a write copies
// the nodes on its path first (aggregates included) and never modifies a shared node,
// so a clone's counts never move. Reads may run concurrently with each other and with
// writes to other clones; writes to one tree are serialized by its owner. The fork
// drops google/btree's free list (nodes go to the garbage collector, as they mostly
// do anyway once shared with clones), descending iteration and DeleteMin/Max.
//
// It must never decide anything about its items: order, counting and stamps come from
// the functions it is given.
package ostree
