package kv

import (
	"context"
	"fmt"
	"sync"
)

// Watch slots. A watch holds a slot from its start to its end, counted twice:
//
//   - node-wide, at most Config.MaxWatches;
//   - per caller identity, at most Config.MaxWatchesPerToken, so that one token (a
//     read-only one will do) cannot take every slot of the node and lock out the
//     others: with MaxWatches 10000 and 2000 per token, one token holding 2000 leaves
//     8000 for the rest.
//
// The identity is the token's accessor ID when ACLs are enforced; without ACLs every
// caller is anonymous and only the node-wide bound applies. Every door (GET
// /v1/watch, the stream's watch op, typed watches) takes its slot here.

// watchSlots counts the watches of each identity.
type watchSlots struct {
	mu    sync.Mutex
	count map[string]int
}

// watchIdentity is whom ctx's watch is counted against ("": nobody in particular).
func watchIdentity(ctx context.Context) string {
	if az := authzOf(ctx); az != nil {
		return az.Accessor()
	}
	return ""
}

// acquireWatch takes a watch slot for ctx's caller, or answers ErrTooManyWatches;
// release gives it back (once).
func (s *Server) acquireWatch(ctx context.Context) (release func(), err error) {
	if n := s.watches.Add(1); s.cfg.MaxWatches > 0 && n > int64(s.cfg.MaxWatches) {
		s.watches.Add(-1)
		return nil, fmt.Errorf("%w: this node serves its maximum of %d", ErrTooManyWatches, s.cfg.MaxWatches)
	}
	id, max := watchIdentity(ctx), s.cfg.MaxWatchesPerToken
	if id == "" || max <= 0 {
		return sync.OnceFunc(func() { s.watches.Add(-1) }), nil
	}
	ws := &s.watchSlots
	ws.mu.Lock()
	if ws.count[id] >= max {
		ws.mu.Unlock()
		s.watches.Add(-1)
		return nil, fmt.Errorf("%w: this token holds its maximum of %d watches on this node; cancel one", ErrTooManyWatches, max)
	}
	if ws.count == nil {
		ws.count = map[string]int{}
	}
	ws.count[id]++
	ws.mu.Unlock()
	return sync.OnceFunc(func() {
		ws.mu.Lock()
		if ws.count[id]--; ws.count[id] == 0 {
			delete(ws.count, id)
		}
		ws.mu.Unlock()
		s.watches.Add(-1)
	}), nil
}
