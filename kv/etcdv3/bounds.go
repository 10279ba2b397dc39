package etcdv3

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"
)

// What one client may hold of a node through this door (issue #33). Every bound is
// the core's, counted with the client's use of every other door, except those that
// only HTTP/2 has, set in New with the same numbers as the HTTP port's h2c:
//
//   - a call holds a slot from its headers to its end, taken by tap before gRPC starts
//     the call's goroutine: a stream (Watch, LeaseKeepAlive, RangeStream, Snapshot,
//     gRPC health Watch) one of its client's connections-and-streams budget
//     (kv.Server.OpenStream, Config.MaxConnsPerClient, 2,500 by default), a unary call
//     one of its requests in flight (kv.Server.AdmitRequest,
//     Config.MaxInFlightPerClient, 2,500). A call over either is refused with
//     ResourceExhausted (etcd's "too many requests") and costs nothing more; a call
//     whose request message never comes holds its slot, not one more.
//   - one connection carries at most Config.MaxStreamInFlight calls (HTTP/2's
//     SETTINGS_MAX_CONCURRENT_STREAMS, 1,024): the client waits to open one more.
//   - a call's metadata is at most kv.MaxHeaderListBytes, as a request's headers on
//     the HTTP port.
//   - a request message takes the length its prefix announces from the client's
//     request bytes in flight (kv.Server.AdmitBytes) before gRPC reads it
//     (msgbytes.go); a stream may be pushed at most 64 KiB (its window) beyond.
//   - a Watch stream holds one outstanding RequestProgress (watch.go); its watches
//     are bounded by the core's watch bounds.

// tap admits a call as its headers arrive, before gRPC starts its goroutine: see
// above. The call's slot (callSlot) goes back once the call's context has ended —
// gRPC ends it when the call finishes, is reset, or its connection closes — and its
// handler, if it ran, has returned.
func (e *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	src := peerAddr(ctx)
	if e.streaming[info.FullMethodName] {
		release, err := e.core.OpenStream(src)
		if err != nil {
			return nil, etcdError(err)
		}
		return withCallSlot(ctx, release, info.Header), nil
	}
	if err := e.core.AdmitRequest(src); err != nil {
		return nil, etcdError(err)
	}
	return withCallSlot(ctx, func() { e.core.ReleaseRequest(src) }, info.Header), nil
}

// callSlot is the slot tap took for a call, and the call's context (its parent's,
// carrying the slot: one allocation a call, not two). The call's stream holds it until
// its context ends, and the call's handler while it runs: a client that resets its
// calls (HTTP/2's rapid reset) gets a slot back only once its handler has returned, so
// it never runs more handlers than it has slots.
type callSlot struct {
	context.Context
	mu      sync.Mutex
	holders int // the stream, and the handler while it runs; 0: given back
	release func()
	dropFn  func() // drop, made once for every holder
	// md is the call's header metadata as tap got it (the map gRPC puts in the
	// call's context, not a copy): firstIncoming reads it.
	md metadata.MD
}

type callSlotKey struct{}

// Value is the slot for callSlotKey, the parent's value for any other key.
func (c *callSlot) Value(key any) any {
	if key == (callSlotKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// withCallSlot is ctx, the call's context, holding a slot that release gives back; md
// is the call's header metadata.
func withCallSlot(ctx context.Context, release func(), md metadata.MD) context.Context {
	c := &callSlot{Context: ctx, holders: 1, release: release, md: md}
	c.dropFn = c.drop
	context.AfterFunc(ctx, c.dropFn)
	return c
}

// holdCallSlot holds the slot of ctx's call while its handler runs, until drop; ok is
// false when the call has ended already and given its slot back: the handler must not
// run. A call without a slot (none was taken) is ok.
func holdCallSlot(ctx context.Context) (drop func(), ok bool) {
	c, _ := ctx.Value(callSlotKey{}).(*callSlot)
	if c == nil {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holders == 0 {
		return nil, false
	}
	c.holders++
	return c.dropFn, true
}

func (c *callSlot) drop() {
	c.mu.Lock()
	c.holders--
	last := c.holders == 0
	c.mu.Unlock()
	if last {
		c.release()
	}
}

// streamingMethods are the full names of the streaming methods g serves.
func streamingMethods(g *grpc.Server) map[string]bool {
	out := map[string]bool{}
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			if m.IsClientStream || m.IsServerStream {
				out["/"+svc+"/"+m.Name] = true
			}
		}
	}
	return out
}
