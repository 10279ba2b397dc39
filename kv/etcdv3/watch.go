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

// etcdWatch serves etcd's Watch service: many watches on one stream, each a watch of
// the core (Watch), opened with the rules of GET /v1/watch.
type etcdWatch struct {
	pb.UnimplementedWatchServer
	e *Server
}

// etcdWatchStream is one Watch stream. Sends are serialized by sendMu; watches maps
// watch IDs to their pumps.
type etcdWatchStream struct {
	e      *Server
	stream pb.Watch_WatchServer
	ctx    context.Context
	sendMu sync.Mutex
	done   bool // under sendMu: the handler returned, the stream takes no more sends

	mu      sync.Mutex
	watches map[int64]*etcdWatcher
	nextID  int64
	wg      sync.WaitGroup // pumps and progress answers
}

// etcdWatcher is one watch of a stream, pumped by its own goroutine.
type etcdWatcher struct {
	id              int64
	w               *kv.Watch // replaced by resume (under the stream's mu), read by the pump
	key, end        []byte    // the watched range, for resume
	notifyFn        func()
	cancel          context.CancelFunc
	exited          chan struct{}
	notify          chan struct{}   // cap 1: the watcher may have something
	progress        chan chan int64 // a RequestProgress asks for the revision reached
	prevKV          bool
	noPut, noDelete bool
	progressNotify  bool
}

// Watch serves one Watch stream until the client ends it, the server stops, or (with
// require-leader metadata) the node loses its leader.
func (x etcdWatch) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	if hasLeaderMD(stream.Context()) {
		if lost := x.e.core.LeaderLost(); lost != nil {
			stop := context.AfterFunc(lost, func() { cancel(context.Cause(lost)) })
			defer stop()
		}
	}
	go func() {
		select {
		case <-x.e.stop:
			cancel(raft.ErrShutdown)
		case <-ctx.Done():
		}
	}()
	ws := &etcdWatchStream{e: x.e, stream: stream, ctx: ctx, watches: map[int64]*etcdWatcher{}}
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
	ws.closeAll()
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
			ws.wg.Add(1)
			go func() { defer ws.wg.Done(); ws.requestProgress() }()
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
// rules of GET /v1/watch), then its pump.
func (ws *etcdWatchStream) create(cr *pb.WatchCreateRequest) {
	id, err := ws.reserveID(cr.WatchId)
	if err != nil {
		ws.refuse(-1, err)
		return
	}
	w := &etcdWatcher{id: id, exited: make(chan struct{}), notify: make(chan struct{}, 1),
		progress: make(chan chan int64), prevKV: cr.PrevKv, progressNotify: cr.ProgressNotify}
	for _, f := range cr.Filters {
		w.noPut = w.noPut || f == pb.WatchCreateRequest_NOPUT
		w.noDelete = w.noDelete || f == pb.WatchCreateRequest_NODELETE
	}
	notify := func() {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	// cr.Fragment is accepted and ignored: answers are never split, and etcd clients
	// accept whole ones.
	end, err := rangeEnd(cr.Key, cr.RangeEnd)
	if err == nil {
		w.key, w.end, w.notifyFn = cr.Key, end, notify
		w.w, err = ws.e.core.Watch(ws.ctx, callerOf(ws.ctx), kv.WatchRequest{Key: cr.Key, End: end,
			StartRevision: cr.StartRevision, PrevKV: cr.PrevKv, Notify: notify})
	}
	if err != nil {
		ws.release(id)
		ws.refuse(id, err)
		return
	}
	ws.start(w, w.w.Revision)
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
	ws.watches[want] = &etcdWatcher{id: want, exited: closedChan} // placeholder until started
	return want, nil
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (ws *etcdWatchStream) release(id int64) {
	ws.mu.Lock()
	delete(ws.watches, id)
	ws.mu.Unlock()
}

// start answers the create and starts the watch's pump.
func (ws *etcdWatchStream) start(w *etcdWatcher, rev int64) {
	ctx, cancel := context.WithCancel(ws.ctx)
	w.cancel = cancel
	if ctx.Err() != nil { // the stream is ending
		cancel()
		w.w.Close()
		ws.release(w.id)
		return
	}
	ws.mu.Lock()
	ws.watches[w.id] = w
	ws.wg.Add(1)
	ws.mu.Unlock()
	// The created answer goes out before the pump can send an event.
	ws.send(&pb.WatchResponse{Header: ws.e.header(rev), WatchId: w.id, Created: true})
	go func() {
		defer ws.wg.Done()
		defer close(w.exited)
		defer func() { w.w.Close() }() // the watch resume left
		if err := ws.pump(ctx, w); err != nil {
			ws.ended(w, err)
		}
	}()
}

// ended answers a watch that the server ended (compacted, too slow, rights lost).
func (ws *etcdWatchStream) ended(w *etcdWatcher, err error) {
	ws.release(w.id)
	resp := &pb.WatchResponse{Header: ws.e.header(0), WatchId: w.id, Canceled: true,
		CancelReason: status.Convert(etcdError(err)).Message()}
	var werr *fsm.WatchError
	if errors.As(err, &werr) && werr.CompactRevision > 0 {
		resp.CompactRevision = werr.CompactRevision
	}
	ws.send(resp)
}

// cancelWatch ends a watch at the client's request.
func (ws *etcdWatchStream) cancelWatch(id int64) {
	ws.mu.Lock()
	w, ok := ws.watches[id]
	delete(ws.watches, id)
	ws.mu.Unlock()
	if !ok {
		return
	}
	if w.cancel != nil {
		w.cancel()
	}
	<-w.exited
	ws.send(&pb.WatchResponse{Header: ws.e.header(0), WatchId: id, Canceled: true})
}

// closeAll ends every watch of the stream and waits for their pumps.
func (ws *etcdWatchStream) closeAll() {
	ws.mu.Lock()
	for _, w := range ws.watches {
		if w.cancel != nil {
			w.cancel()
		}
	}
	ws.mu.Unlock()
	ws.wg.Wait()
}

// pump sends the watch's events until ctx ends (nil) or the watch does (its error).
// It is the only caller of the watcher's Next and Bookmark, so a revision it reports
// to a progress request has had all its events sent.
func (ws *etcdWatchStream) pump(ctx context.Context, w *etcdWatcher) error {
	var tick <-chan time.Time
	if w.progressNotify {
		t := time.NewTicker(ws.e.progressNotifyInterval())
		defer t.Stop()
		tick = t.C
	}
	if err := ws.drain(w); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.notify:
			if err := ws.drain(w); err != nil {
				return err
			}
		case reply := <-w.progress:
			err := ws.drain(w)
			rev, ok := w.w.Bookmark()
			if err != nil || !ok {
				rev = -1
			}
			reply <- rev
			if err != nil {
				return err
			}
		case <-tick:
			if err := ws.drain(w); err != nil {
				return err
			}
			if rev, ok := w.w.Bookmark(); ok {
				ws.send(&pb.WatchResponse{Header: ws.e.header(rev), WatchId: w.id})
			}
		}
	}
}

// drain sends whatever the watcher has ready.
func (ws *etcdWatchStream) drain(w *etcdWatcher) error {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 1 << 16 {
		groups, err := w.w.Next(done)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		if err != nil {
			if err = ws.resume(w, err); err != nil {
				return err
			}
			continue
		}
		if err := w.w.RightsLost(); err != nil {
			return err
		}
		for len(groups) > 0 { // etcd's watchBatchMaxRevs: at most 1,000 revisions an answer
			n := min(len(groups), etcdMaxRevsPerAnswer)
			if err := ws.sendEvents(w, groups[:n]); err != nil {
				return err
			}
			groups = groups[n:]
		}
	}
	return nil
}

// resume reopens a watch the core ended as too slow (its queue reached its bound)
// from the first revision it had not been given, as etcd catches a slow watcher up
// from history instead of ending it: an etcd client takes a watch the server cancels
// without a compaction for a closed one and tells its caller nothing. Any other end,
// or a reopen that fails (a compacted revision), is returned.
func (ws *etcdWatchStream) resume(w *etcdWatcher, err error) error {
	var werr *fsm.WatchError
	if !errors.As(err, &werr) || !errors.Is(werr.Err, fsm.ErrSlowWatcher) {
		return err
	}
	nw, err := ws.e.core.Watch(ws.ctx, callerOf(ws.ctx), kv.WatchRequest{Key: w.key, End: w.end,
		StartRevision: werr.LastRevision + 1, PrevKV: w.prevKV, Notify: w.notifyFn})
	if err != nil {
		return err // the old watch is closed when the pump ends
	}
	ws.mu.Lock()
	old := w.w
	w.w = nw
	ws.mu.Unlock()
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

// requestProgress answers a RequestProgress: once every watch of the stream has sent
// every event up to some revision, one answer (watch ID -1) with the least of them.
// A watch with events still queued is asked again, for at most two seconds; then the
// request goes unanswered, as etcd's does while watches are unsynced.
func (ws *etcdWatchStream) requestProgress() {
	for range 40 {
		rev, ok := ws.progressOnce()
		if ok {
			ws.send(&pb.WatchResponse{Header: ws.e.header(rev), WatchId: -1})
			return
		}
		select {
		case <-ws.ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// progressOnce asks each pump for the revision it has sent everything up to.
func (ws *etcdWatchStream) progressOnce() (int64, bool) {
	ws.mu.Lock()
	ws2 := make([]*etcdWatcher, 0, len(ws.watches))
	for _, w := range ws.watches {
		if w.w != nil {
			ws2 = append(ws2, w)
		}
	}
	ws.mu.Unlock()
	least := int64(-1)
	if len(ws2) == 0 {
		rev, _, err := ws.e.core.Revisions(ws.ctx)
		if err != nil {
			return 0, false
		}
		return rev, true
	}
	for _, w := range ws2 {
		reply := make(chan int64, 1)
		select {
		case w.progress <- reply:
		case <-w.exited:
			continue
		case <-ws.ctx.Done():
			return 0, false
		}
		rev := <-reply
		if rev < 0 {
			return 0, false
		}
		if least < 0 || rev < least {
			least = rev
		}
	}
	return least, least >= 0
}

// progressNotifyInterval is ProgressNotifyInterval, or its default when unset.
func (e *Server) progressNotifyInterval() time.Duration {
	if e.ProgressNotifyInterval > 0 {
		return e.ProgressNotifyInterval
	}
	return DefaultProgressNotifyInterval
}
