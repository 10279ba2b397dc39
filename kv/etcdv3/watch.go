package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/raft"
)

// DefaultProgressNotifyInterval is how often a watch created with progress_notify
// hears the revision it has reached while idle, unless Server.ProgressNotifyInterval
// says otherwise (etcd's default).
const DefaultProgressNotifyInterval = 10 * time.Minute

// etcdMaxRevsPerAnswer bounds the revisions of one watch answer, as etcd's
// watchBatchMaxRevs does: a watch catching up sends its backlog in answers of at most
// this many revisions, not one answer of everything queued.
const etcdMaxRevsPerAnswer = 1000

// Watches on the etcd door. A watch's start (validation, rights, the watch bounds, the
// watcher) is the core's (kv.Server.Watch), taken by the stream's receiving goroutine
// in the order of the client's requests. Once started, every watch of a Watch stream
// is served by the stream's one pump goroutine, as the stream protocol's are
// (kv/stream/watch.go): the hub's dispatcher marks a watch ready (kv.WatchRequest.Notify),
// and the pump polls the ready watches' Next and sends their events. An idle watch
// therefore costs its fsm.Watcher and a little bookkeeping, not a blocked goroutine
// (2,000 watches on one stream: TestWatchStreamGoroutinesDoNotGrowWithWatches).
//
// The pump is the only caller of a live watch's Next and Bookmark, so a revision it
// reports (a progress notification, a RequestProgress answer) has had every event of
// the watch up to it sent. A watch's own lock (etcdWatcher.mu) is held while the pump
// serves it and while a cancel ends it: no event of a watch follows its canceled
// answer.

// etcdWatch serves etcd's Watch service: many watches on one stream, each a watch of
// the core (Watch), opened with the rules of GET /v1/watch.
type etcdWatch struct {
	pb.UnimplementedWatchServer
	e *Server
}

// etcdWatchStream is one Watch stream. Sends are serialized by sendMu. Lock order: an
// etcdWatcher's mu before mu and readyMu; mu is never held while taking a watch's.
type etcdWatchStream struct {
	e      *Server
	stream pb.Watch_WatchServer
	ctx    context.Context
	sendMu sync.Mutex
	done   bool // under sendMu: the handler returned, the stream takes no more sends

	mu      sync.Mutex
	watches map[int64]*etcdWatcher // by watch ID: reserved, live, and ending watches
	nextID  int64
	closed  bool           // the pump has closed every watch: a watch started now is closed at once
	wg      sync.WaitGroup // the pump

	// readyMu guards ready; Notify takes it (from the dispatcher or Close), so it is
	// never held while calling into a watcher.
	readyMu sync.Mutex
	ready   []*etcdWatcher
	wake    chan struct{} // cap 1: ready is not empty
	// progressAsked (cap 1) holds the stream's one outstanding RequestProgress: a
	// request while one is outstanding is coalesced into it, as etcd's are, so that
	// nothing a client sends queues without bound (issue #33: a goroutine per request,
	// each blocked on its send, let one stream hold 300,000 goroutines).
	progressAsked chan struct{}
}

// etcdWatcher is one watch of a stream. Its options are set before it is started and
// read-only after.
type etcdWatcher struct {
	id              int64
	key, end        []byte // the watched range, for resume
	prevKV          bool
	noPut, noDelete bool
	progressNotify  bool
	queued          bool // in the stream's ready list (under its readyMu)

	// mu is held by the pump while it serves the watch, and by whoever ends it.
	mu   sync.Mutex
	w    *kv.Watch // replaced by resume; nil while only the ID is reserved
	live bool      // the created answer went out and the watch has not ended
	gone bool      // the watch ended (canceled, ended by the server, or the stream closed)
}

// polled is a done context: Next with it is a poll.
var polled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Watch serves one Watch stream until the client ends it, the server stops, or (with
// require-leader metadata) the node has been without a leader for the stream grace
// (kv.Server.StreamLeaderLost): as etcd's, such a stream outlives an election.
func (x etcdWatch) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stopLost := x.e.endOnLeaderLoss(stream.Context(), cancel)
	defer stopLost()
	stopped := context.AfterFunc(x.e.stopping, func() { cancel(raft.ErrShutdown) })
	defer stopped()
	ws := &etcdWatchStream{e: x.e, stream: stream, ctx: ctx, watches: map[int64]*etcdWatcher{},
		wake: make(chan struct{}, 1), progressAsked: make(chan struct{}, 1)}
	ws.wg.Add(1)
	go ws.pump()
	recvDone := make(chan error, 1)
	go func() { recvDone <- ws.recvLoop() }()
	var err error
	select {
	case err = <-recvDone:
	case <-ctx.Done():
		if cause := context.Cause(ctx); errors.Is(cause, raft.ErrNoLeader) || errors.Is(cause, raft.ErrShutdown) {
			err = cause
		}
	}
	cancel(nil)
	ws.wg.Wait() // the pump closes every watch as it leaves
	// recvLoop may still be handling a request until its Recv fails, which happens
	// once this handler has returned: what it would send is dropped.
	ws.sendMu.Lock()
	ws.done = true
	ws.sendMu.Unlock()
	return err
}

// recvLoop reads the client's requests until the stream ends.
func (ws *etcdWatchStream) recvLoop() error {
	for {
		req, err := ws.stream.Recv()
		if err != nil {
			return nil // the client went away or the stream ended: nothing to answer
		}
		switch r := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			ws.create(r.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			ws.cancelWatch(r.CancelRequest.WatchId)
		case *pb.WatchRequest_ProgressRequest:
			ws.askProgress()
		}
	}
}

func (ws *etcdWatchStream) send(resp *pb.WatchResponse) error {
	ws.sendMu.Lock()
	defer ws.sendMu.Unlock()
	if ws.done {
		return context.Canceled
	}
	return ws.stream.Send(resp)
}

// refuse answers a create that failed. A start revision that is compacted is a
// watch created then canceled with the compact revision (clientv3 reports
// ErrCompacted); anything else is etcd's refused create: watch ID -1, the reason the
// etcd error's message, which clientv3 turns back into the error.
func (ws *etcdWatchStream) refuse(id int64, err error) {
	if errors.Is(err, fsm.ErrCompacted) && id >= 0 {
		compact := int64(0)
		var werr *fsm.WatchError
		if errors.As(err, &werr) {
			compact = werr.CompactRevision
		}
		if _, c, verr := ws.e.core.Revisions(ws.ctx); compact == 0 && verr == nil {
			compact = c
		}
		ws.send(&pb.WatchResponse{Header: ws.e.header(0), WatchId: id, Created: true})
		ws.send(&pb.WatchResponse{Header: ws.e.header(0), WatchId: id, Canceled: true, CompactRevision: max(compact, 1),
			CancelReason: status.Convert(etcdError(err)).Message()})
		return
	}
	ws.send(&pb.WatchResponse{Header: ws.e.header(0), WatchId: -1, Created: true, Canceled: true,
		CancelReason: status.Convert(etcdError(err)).Message()})
}

// create opens one watch: the core's Watch (the range rules of a ranged get, the watch
// rules of GET /v1/watch), then hands it to the pump.
func (ws *etcdWatchStream) create(cr *pb.WatchCreateRequest) {
	id, err := ws.reserveID(cr.WatchId)
	if err != nil {
		ws.refuse(-1, err)
		return
	}
	w := &etcdWatcher{id: id, prevKV: cr.PrevKv, progressNotify: cr.ProgressNotify}
	for _, f := range cr.Filters {
		w.noPut = w.noPut || f == pb.WatchCreateRequest_NOPUT
		w.noDelete = w.noDelete || f == pb.WatchCreateRequest_NODELETE
	}
	// cr.Fragment is accepted and ignored: answers are never split, and etcd clients
	// accept whole ones.
	end, err := rangeEnd(cr.Key, cr.RangeEnd)
	if err == nil {
		w.key, w.end = cr.Key, end
		w.w, err = ws.e.core.Watch(ws.ctx, callerOf(ws.ctx), ws.watchRequest(w, cr.StartRevision))
	}
	if err != nil {
		ws.release(id)
		ws.refuse(id, err)
		return
	}
	ws.start(w)
}

// watchRequest is the core's watch of w's range from start (0: after the node's
// revision), whose notifications mark w ready for the pump.
func (ws *etcdWatchStream) watchRequest(w *etcdWatcher, start int64) kv.WatchRequest {
	return kv.WatchRequest{Key: w.key, End: w.end, StartRevision: start, PrevKV: w.prevKV,
		Notify: func() { ws.markReady(w) }}
}

// reserveID takes the client's watch ID (0: the next free one).
func (ws *etcdWatchStream) reserveID(want int64) (int64, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if want < 0 {
		return 0, fmt.Errorf("%w: watch ID %d is negative", kv.ErrInvalidParam, want)
	}
	if want == 0 {
		for ws.watches[ws.nextID] != nil {
			ws.nextID++
		}
		want = ws.nextID
		ws.nextID++
	} else if _, ok := ws.watches[want]; ok {
		return 0, fmt.Errorf("%w: duplicate watch ID %d", kv.ErrInvalidParam, want)
	}
	ws.watches[want] = &etcdWatcher{id: want} // placeholder until started
	return want, nil
}

func (ws *etcdWatchStream) release(id int64) {
	ws.mu.Lock()
	delete(ws.watches, id)
	ws.mu.Unlock()
}

// start answers the create and hands the watch to the pump; the created answer goes
// out before the pump can send an event of it.
func (ws *etcdWatchStream) start(w *etcdWatcher) {
	ws.mu.Lock()
	if ws.closed { // the stream is ending
		delete(ws.watches, w.id)
		ws.mu.Unlock()
		w.w.Close()
		return
	}
	ws.watches[w.id] = w
	ws.mu.Unlock()
	ws.send(&pb.WatchResponse{Header: ws.e.header(w.w.Revision), WatchId: w.id, Created: true})
	w.mu.Lock()
	w.live = !w.gone
	w.mu.Unlock()
	ws.markReady(w) // its first Next registers it with the hub (and replays a past start revision)
}

// end closes w and forgets it (w.mu held); it reports whether w was still open.
func (ws *etcdWatchStream) end(w *etcdWatcher) bool {
	if w.gone || w.w == nil {
		return false
	}
	w.gone, w.live = true, false
	w.w.Close()
	ws.mu.Lock()
	if ws.watches[w.id] == w {
		delete(ws.watches, w.id)
	}
	ws.mu.Unlock()
	return true
}

// ended answers a watch that the server ended (compacted, too slow, rights lost)
// (pump, w.mu held).
func (ws *etcdWatchStream) ended(w *etcdWatcher, err error) {
	if !ws.end(w) {
		return
	}
	resp := &pb.WatchResponse{Header: ws.e.header(0), WatchId: w.id, Canceled: true,
		CancelReason: status.Convert(etcdError(err)).Message()}
	var werr *fsm.WatchError
	if errors.As(err, &werr) && werr.CompactRevision > 0 {
		resp.CompactRevision = werr.CompactRevision
	}
	ws.send(resp)
}

// cancelWatch ends a watch at the client's request. It waits for the pump to finish
// serving the watch, so that no event of it follows the canceled answer.
func (ws *etcdWatchStream) cancelWatch(id int64) {
	ws.mu.Lock()
	w, ok := ws.watches[id]
	ws.mu.Unlock()
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if ws.end(w) {
		ws.send(&pb.WatchResponse{Header: ws.e.header(0), WatchId: id, Canceled: true})
	}
}

// markReady queues w for the pump (any goroutine, without blocking): its Notify.
func (ws *etcdWatchStream) markReady(w *etcdWatcher) {
	ws.readyMu.Lock()
	if !w.queued {
		w.queued = true
		ws.ready = append(ws.ready, w)
	}
	ws.readyMu.Unlock()
	select {
	case ws.wake <- struct{}{}:
	default:
	}
}

// pump serves the stream's watches until the stream ends, then closes them: the
// ready ones' events, progress notifications every progress notify interval, and the
// answers to RequestProgress.
func (ws *etcdWatchStream) pump() {
	defer ws.wg.Done()
	defer ws.closeWatches()
	tick := time.NewTicker(ws.e.progressNotifyInterval())
	defer tick.Stop()
	var batch []*etcdWatcher
	var progress progressAnswer
	for {
		select {
		case <-ws.ctx.Done():
			return
		case <-ws.wake:
			ws.readyMu.Lock()
			batch, ws.ready = ws.ready, batch[:0]
			for _, w := range batch {
				w.queued = false
			}
			ws.readyMu.Unlock()
			for _, w := range batch {
				ws.serve(w)
			}
			clear(batch)
		case <-ws.progressAsked:
			progress.tries = progressTries
			ws.answerProgress(&progress)
		case <-progress.retry:
			ws.answerProgress(&progress)
		case <-tick.C:
			ws.progressNotify()
		}
	}
}

// serve sends what w has ready, a bounded part of it when it has much: a busy watch
// is marked ready again and yields to the other watches of the stream (pump).
func (ws *etcdWatchStream) serve(w *etcdWatcher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.live {
		return // starting (start marks it ready again) or ended
	}
	more, err := ws.drain(w, serveRounds)
	if err != nil {
		ws.ended(w, err)
		return
	}
	if more {
		ws.markReady(w)
	}
}

// serveRounds bounds the Next calls of one serve of a watch.
const serveRounds = 8

// drain sends what w's watcher has ready, in at most rounds Next calls, and reports
// whether it may have more (pump, w.mu held). An error ends the watch.
func (ws *etcdWatchStream) drain(w *etcdWatcher, rounds int) (more bool, err error) {
	for range rounds {
		groups, err := w.w.Next(polled)
		if errors.Is(err, context.Canceled) {
			return false, nil
		}
		if err != nil {
			if err = ws.resume(w, err); err != nil {
				return false, err
			}
			continue
		}
		if err := w.w.RightsLost(); err != nil {
			return false, err
		}
		for len(groups) > 0 { // etcd's watchBatchMaxRevs: at most 1,000 revisions an answer
			n := min(len(groups), etcdMaxRevsPerAnswer)
			if err := ws.sendEvents(w, groups[:n]); err != nil {
				return false, err
			}
			groups = groups[n:]
		}
	}
	return true, nil
}

// resume reopens a watch the core ended as too slow (its queue reached its bound)
// from the first revision it had not been given, as etcd catches a slow watcher up
// from history instead of ending it: an etcd client takes a watch the server cancels
// without a compaction for a closed one and tells its caller nothing. Any other end,
// or a reopen that fails (a compacted revision), is returned (pump, w.mu held).
func (ws *etcdWatchStream) resume(w *etcdWatcher, err error) error {
	var werr *fsm.WatchError
	if !errors.As(err, &werr) || !errors.Is(werr.Err, fsm.ErrSlowWatcher) {
		return err
	}
	nw, err := ws.e.core.Watch(ws.ctx, callerOf(ws.ctx), ws.watchRequest(w, werr.LastRevision+1))
	if err != nil {
		return err // ended closes the old watch
	}
	old := w.w
	w.w = nw
	old.Close()
	return nil
}

// sendEvents sends the events of groups in one answer, without those the watch
// filters out, the door hides, or the token may not read.
func (ws *etcdWatchStream) sendEvents(w *etcdWatcher, groups []*fsm.RevisionEvents) error {
	var evs []*mvccpb.Event
	var last int64
	for _, g := range groups {
		last = g.Revision
		for _, ev := range g.Events {
			if (ev.Type == fsm.EventPut && w.noPut) || (ev.Type == fsm.EventDelete && w.noDelete) ||
				ws.e.core.Hidden(ev.KV.Key) || !w.w.Allowed(ev.KV.Key) {
				continue
			}
			out := &mvccpb.Event{Type: mvccpb.PUT, Kv: etcdKeyValue(ev.KV, false)}
			if ev.Type == fsm.EventDelete {
				out.Type = mvccpb.DELETE
			}
			if w.prevKV && ev.PrevKV != nil {
				out.PrevKv = etcdKeyValue(*ev.PrevKV, false)
			}
			evs = append(evs, out)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	return ws.send(&pb.WatchResponse{Header: ws.e.header(last), WatchId: w.id, Events: evs})
}

// progressNotify sends each live watch created with progress_notify the revision it
// has reached, once it has sent every event up to it (pump).
func (ws *etcdWatchStream) progressNotify() {
	for _, w := range ws.snapshot(func(w *etcdWatcher) bool { return w.progressNotify }) {
		if rev, ok := ws.reached(w); ok {
			ws.send(&pb.WatchResponse{Header: ws.e.header(rev), WatchId: w.id})
		}
	}
}

// reached sends what w has ready and returns the revision up to which it has sent
// every event; ok is false when w is not live or still has events queued (pump).
func (ws *etcdWatchStream) reached(w *etcdWatcher) (rev int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.live {
		return 0, false
	}
	return ws.reachedLocked(w)
}

// reachedLocked is reached of a live watch, w.mu held.
func (ws *etcdWatchStream) reachedLocked(w *etcdWatcher) (rev int64, ok bool) {
	if _, err := ws.drain(w, 1<<16); err != nil {
		ws.ended(w, err)
		return 0, false
	}
	return w.w.Bookmark()
}

// snapshot returns the stream's started watches that keep says.
func (ws *etcdWatchStream) snapshot(keep func(*etcdWatcher) bool) []*etcdWatcher {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*etcdWatcher, 0, len(ws.watches))
	for _, w := range ws.watches {
		if w.w != nil && keep(w) {
			out = append(out, w)
		}
	}
	return out
}

// closeWatches closes every watch of the stream when it ends (pump).
func (ws *etcdWatchStream) closeWatches() {
	ws.mu.Lock()
	ws.closed = true
	all := make([]*etcdWatcher, 0, len(ws.watches))
	for _, w := range ws.watches {
		all = append(all, w)
	}
	ws.mu.Unlock()
	for _, w := range all {
		w.mu.Lock()
		ws.end(w)
		w.mu.Unlock()
	}
}

// askProgress asks the pump to answer a RequestProgress, unless one is outstanding:
// its answer serves this one too (recvLoop; it never blocks).
func (ws *etcdWatchStream) askProgress() {
	select {
	case ws.progressAsked <- struct{}{}:
	default:
	}
}

// progressTries bounds the attempts to answer one RequestProgress, progressRetry
// apart: two seconds.
const (
	progressTries = 40
	progressRetry = 50 * time.Millisecond
)

// progressAnswer is the pump's outstanding RequestProgress: tries left, and the timer
// of the next (nil: none outstanding).
type progressAnswer struct {
	tries int
	retry <-chan time.Time
}

// answerProgress answers the outstanding RequestProgress: once every watch of the
// stream has sent every event up to some revision, one answer (watch ID -1) with the
// least of them. While a watch has events still queued it tries again progressRetry
// later, at most progressTries times; then the request goes unanswered, as etcd's does
// while watches are unsynced (pump).
func (ws *etcdWatchStream) answerProgress(p *progressAnswer) {
	p.retry = nil
	if rev := ws.progressOnce(); rev >= 0 {
		p.tries = 0
		ws.send(&pb.WatchResponse{Header: ws.e.header(rev), WatchId: -1})
		return
	}
	if p.tries--; p.tries > 0 {
		p.retry = time.After(progressRetry)
	}
}

// progressOnce returns the least revision up to which every watch of the stream has
// sent every event, or -1 when some watch has events queued or is still starting
// (its replay may be below the others' revision) (pump).
func (ws *etcdWatchStream) progressOnce() int64 {
	all := ws.snapshot(func(*etcdWatcher) bool { return true })
	if len(all) == 0 {
		rev, _, err := ws.e.core.Revisions(ws.ctx)
		if err != nil {
			return -1
		}
		return rev
	}
	least := int64(-1)
	for _, w := range all {
		rev, ok, gone := ws.progressOf(w)
		if gone {
			continue
		}
		if !ok {
			return -1
		}
		if least < 0 || rev < least {
			least = rev
		}
	}
	return least
}

// progressOf is reached of one watch for progressOnce; gone: the watch has ended
// and counts no more.
func (ws *etcdWatchStream) progressOf(w *etcdWatcher) (rev int64, ok, gone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.gone:
		return 0, false, true
	case !w.live:
		return 0, false, false
	}
	rev, ok = ws.reachedLocked(w)
	return rev, ok, false
}

// progressNotifyInterval is ProgressNotifyInterval, or its default when unset.
func (e *Server) progressNotifyInterval() time.Duration {
	if e.ProgressNotifyInterval > 0 {
		return e.ProgressNotifyInterval
	}
	return DefaultProgressNotifyInterval
}
