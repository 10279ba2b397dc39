package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// Watches on the stream protocol (api/stream_watch.go): each watch runs on its own
// goroutine through the same code as GET /v1/watch (openWatch, pumpWatch) and writes
// its frames into the connection's shared writer. A revision's events are encoded
// once per connection and the bytes shared by every watch of the connection that
// receives them.

// errWatchCanceled is the cause of a watch's context when the client cancels it.
var errWatchCanceled = errors.New("kv: watch canceled by the client")

// streamWatches is a stream connection's watch state.
type streamWatches struct {
	mu     sync.Mutex
	byID   map[uint64]context.CancelCauseFunc
	ctx    context.Context // cancelled when the connection ends or the server shuts down
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// enc caches the encoded events of recent revisions (with and without prev_kv).
	encMu sync.Mutex
	enc   map[encKey][]byte
}

type encKey struct {
	g      *fsm.RevisionEvents
	prevKV bool
}

// encCacheMax bounds the cached encodings of one connection.
const encCacheMax = 256

// watchFrame handles a watch or cancel request (reader goroutine); it never blocks.
func (c *streamConn) watchFrame(req *api.StreamRequest) {
	ws := &c.watches
	if req.Op == api.StreamWatchCancel {
		ws.mu.Lock()
		cancel := ws.byID[req.ID]
		ws.mu.Unlock()
		if cancel != nil {
			cancel(errWatchCanceled)
		}
		return
	}
	fail := func(err error) {
		e := errorBody(err, false)
		c.answer(&api.StreamResponse{ID: req.ID, Op: api.StreamWatch, Err: &e})
	}
	cons := fsm.Linearizable
	if req.Serializable {
		cons = fsm.Serializable
	}
	q, err := c.s.newWatchReq(string(req.Key), req.Prefix, req.Revision, req.PrevKV, req.Progress, cons)
	if err != nil {
		fail(err)
		return
	}
	ws.mu.Lock()
	if ws.byID == nil {
		ws.byID = map[uint64]context.CancelCauseFunc{}
		ws.ctx, ws.cancel = context.WithCancel(c.ctx)
		go func(ctx context.Context, cancel context.CancelFunc) {
			select {
			case <-c.s.watchStop:
				cancel()
			case <-ctx.Done():
			}
		}(ws.ctx, ws.cancel)
	}
	switch max := c.s.cfg.MaxStreamWatches; {
	case ws.byID[req.ID] != nil:
		ws.mu.Unlock()
		fail(fmt.Errorf("%w: watch id %d is in use on this connection", ErrInvalidParam, req.ID))
		return
	case max > 0 && len(ws.byID) >= max:
		ws.mu.Unlock()
		fail(fmt.Errorf("%w: this connection has its maximum of %d watches; cancel one or open another connection",
			ErrTooManyWatches, max))
		return
	}
	ctx, cancel := context.WithCancelCause(ws.ctx)
	ws.byID[req.ID] = cancel
	ws.wg.Add(1)
	ws.mu.Unlock()
	go c.runWatch(ctx, req.ID, q)
}

// runWatch serves one watch until it ends, the client cancels it or the connection
// closes.
func (c *streamConn) runWatch(ctx context.Context, id uint64, q watchReq) {
	ws := &c.watches
	defer func() {
		ws.mu.Lock()
		if cancel := ws.byID[id]; cancel != nil {
			cancel(nil)
		}
		delete(ws.byID, id)
		ws.mu.Unlock()
		ws.wg.Done()
	}()
	w := &streamWatchWriter{c: c, id: id, prevKV: q.prevKV}
	watcher, rev, done, err := c.s.openWatch(ctx, q)
	var werr *fsm.WatchError
	switch {
	case errors.As(err, &werr) && errors.Is(err, fsm.ErrCompacted):
		w.end(err)
		return
	case err != nil && errors.Is(context.Cause(ctx), errWatchCanceled):
		c.answer(&api.StreamResponse{ID: id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: w.last,
			Reason: api.ReasonCanceled, Message: "the watch was canceled before it started"})
		return
	case err != nil:
		e := errorBody(err, false)
		c.answer(&api.StreamResponse{ID: id, Op: api.StreamWatch, Err: &e})
		return
	}
	defer done()
	w.last = rev
	if start := q.opts.StartRevision; start > 0 {
		w.last = start - 1
	}
	c.answer(&api.StreamResponse{ID: id, Op: api.StreamWatch, Watch: api.StreamWatchCreated, Revision: rev})
	pumpWatch(ctx, watcher, w, q.progress)
	if errors.Is(context.Cause(ctx), errWatchCanceled) {
		c.answer(&api.StreamResponse{ID: id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: w.last,
			Reason: api.ReasonCanceled, Message: "the watch was canceled"})
	}
}

// stopWatches ends every watch of the connection and waits for them (serve's exit).
func (c *streamConn) stopWatches() {
	ws := &c.watches
	ws.mu.Lock()
	if ws.cancel != nil {
		ws.cancel()
	}
	ws.mu.Unlock()
	ws.wg.Wait()
}

// streamWatchWriter writes one watch's frames (a watchWriter).
type streamWatchWriter struct {
	c      *streamConn
	id     uint64
	prevKV bool
	last   int64 // last revision whose events were all written
}

func (w *streamWatchWriter) events(groups []*fsm.RevisionEvents) error {
	for _, g := range groups {
		payload := w.c.encodeEvents(g, w.prevKV)
		if err := w.c.answerFrame(func(b []byte) []byte {
			return api.AppendStreamWatchFrame(b, w.id, g.Revision, payload)
		}); err != nil {
			return err
		}
		w.last = g.Revision
	}
	return nil
}

func (w *streamWatchWriter) progress(rev int64) error {
	w.last = max(w.last, rev)
	r := api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchProgress, Revision: rev}
	return w.c.answerFrame(func(b []byte) []byte { return api.AppendStreamResponse(b, &r) })
}

func (w *streamWatchWriter) end(err error) {
	line := endLine(err)
	w.c.answer(&api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: line.Revision,
		CompactRevision: line.CompactRevision, Reason: line.Reason, Message: line.Message})
}

// encodeEvents returns g's events as an events frame's payload, from the cache when
// another watch of the connection already encoded them.
func (c *streamConn) encodeEvents(g *fsm.RevisionEvents, prevKV bool) []byte {
	k := encKey{g, prevKV}
	ws := &c.watches
	ws.encMu.Lock()
	b, ok := ws.enc[k]
	ws.encMu.Unlock()
	if ok {
		return b
	}
	evs := make([]api.StreamEvent, len(g.Events))
	for i := range g.Events {
		ev := &g.Events[i]
		evs[i] = api.StreamEvent{Type: api.EventPut, KV: toAPI(ev.KV)}
		if ev.Type == fsm.EventDelete {
			evs[i].Type = api.EventDelete
		}
		if prevKV && ev.PrevKV != nil {
			p := toAPI(*ev.PrevKV)
			evs[i].PrevKV = &p
		}
	}
	b = api.AppendStreamEvents(nil, evs)
	ws.encMu.Lock()
	if ws.enc == nil || len(ws.enc) >= encCacheMax {
		ws.enc = make(map[encKey][]byte, encCacheMax)
	}
	ws.enc[k] = b
	ws.encMu.Unlock()
	return b
}

// answerFrame queues the frame app appends, like answer, and returns the
// connection's write error: a watch stops at the first one.
func (c *streamConn) answerFrame(app func([]byte) []byte) error {
	c.wmu.Lock()
	if c.werr == nil {
		_, c.werr = c.bw.Write(app(c.bw.AvailableBuffer()))
	}
	err := c.werr
	c.wmu.Unlock()
	select {
	case c.flush <- struct{}{}:
	default:
	}
	return err
}
