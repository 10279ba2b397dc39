package raft

import "github.com/keel-kv/keel/fsm"

// Watch starts a watcher over this node's applied state (see fsm.Store.Watch); a
// linearizable start is the caller's View(ctx, Linearizable) before it.
func (n *Node) Watch(opts fsm.WatchOptions) (*fsm.Watcher, error) { return n.store.Watch(opts) }
