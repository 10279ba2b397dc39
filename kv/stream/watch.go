package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// Watches on the stream protocol (api/stream_watch.go). A watch's start (validation,
// rights, the MaxWatches count, the linearizable wait, the watcher) is the core's, as
// for GET /v1/watch (CheckWatch, WaitLinearizable, OpenWatch). Starts are taken in batches by the connection's
// starter goroutine, and one linearizable wait (one read-index round) serves every
// linearizable start of a batch: each of them arrived before the wait began, so the
// node has then applied every write acknowledged before each. Once started, every
// watch of the connection is served by the connection's one pump goroutine: the hub's dispatcher marks a watch ready (fsm.WatchOptions.Notify), and
// the pump polls the ready watches' Next and writes their frames. An idle watch
// therefore costs its fsm.Watcher and a little bookkeeping, not a blocked goroutine,
// and a revision fanned out to many watches of one connection costs one goroutine
// wake-up and one encoding, not one per watch.

// streamWatches is a stream connection's watch state.
type streamWatches struct {
	mu     sync.Mutex
	byID   map[uint64]*streamWatch // starting and live watches
	ctx    context.Context         // cancelled when the connection ends or the server shuts down
	cancel context.CancelFunc
	wg     sync.WaitGroup // the pump and the starter
	starts []pendingStart // waiting for the starter (under mu)
	kick   chan struct{}  // cap 1: starts is not empty

	// readyMu guards ready; Notify takes it (from the dispatcher or Close), so it is
	// never held while calling into a watcher.
	readyMu sync.Mutex
	ready   []*streamWatch
	wake    chan struct{} // cap 1: ready is not empty

	// shared: the client reads shared events frames (api.StreamFeatureSharedEvents);
	// set before the connection serves.
	shared bool
	// needLeader: some watch of the connection required a leader (under mu).
	needLeader bool

	// Owned by the pump.
	enc map[encKey][]byte // encoded events of recent revisions
	out []byte            // frames of one pump round
	// pend holds a round's events frames until the round ends, by revision group,
	// when shared: the watches that get a group in one round get it in one frame.
	pend    []pendingEvents
	pendIdx map[encKey]int // index in pend
}

// pendingEvents is a revision group to send to the watches ids.
type pendingEvents struct {
	k   encKey
	ids []uint64
}

// maxPendingGroups bounds the revision groups a pump round holds back.
const maxPendingGroups = 4096

// streamWatch is one watch of a connection.
type streamWatch struct {
	id       uint64
	progress time.Duration
	prevKV   bool

	// Set when the start succeeded (under streamWatches.mu); then owned by the pump.
	live          bool
	queued        bool      // in ready (under readyMu)
	canceled      bool      // the client canceled it (under streamWatches.mu)
	requireLeader bool      // ends when the node loses leader contact
	watcher       *kv.Watch // its Allowed and RightsLost apply the token's current rights
	due           int64     // next progress notification, Unix nanoseconds
	last          int64     // last revision whose events were all written
}

// pendingStart is a validated watch waiting for the starter.
type pendingStart struct {
	w  *streamWatch
	sp kv.WatchSpec
}

type encKey struct {
	g      *fsm.RevisionEvents
	prevKV bool
}

// encCacheMax bounds the cached encodings of one connection.
const encCacheMax = 1024

// watchFrame handles a watch or cancel request (reader goroutine); it never blocks.
func (c *streamConn) watchFrame(req *api.StreamRequest) {
	ws := &c.watches
	if req.Op == api.StreamWatchCancel {
		ws.mu.Lock()
		w := ws.byID[req.ID]
		if w != nil {
			w.canceled = true
		}
		ws.mu.Unlock()
		if w != nil {
			ws.markReady(w)
		}
		return
	}
	fail := func(err error) {
		e := kv.WireError(err, false)
		c.answer(&api.StreamResponse{ID: req.ID, Op: api.StreamWatch, Err: &e})
	}
	w := &streamWatch{id: req.ID, prevKV: req.PrevKV, progress: req.Progress, requireLeader: req.RequireLeader}
	if err := c.d.core.CheckClientCert(c.peer); err != nil {
		fail(err)
		return
	}
	sp, err := c.d.core.CheckWatch(c.ctx, c.caller, kv.WatchRequest{Key: req.Key, Prefix: req.Prefix,
		StartRevision: req.Revision, PrevKV: req.PrevKV, Progress: req.Progress, Linearizable: !req.Serializable,
		Notify: func() { ws.markReady(w) }})
	if err == nil && req.RequireLeader {
		err = c.d.core.LeaderContact()
	}
	if err != nil {
		fail(err)
		return
	}
	ws.mu.Lock()
	if ws.byID == nil {
		ws.byID = map[uint64]*streamWatch{}
		ws.wake = make(chan struct{}, 1)
		ws.kick = make(chan struct{}, 1)
		ws.ctx, ws.cancel = context.WithCancel(c.ctx)
		ws.wg.Add(2)
		go c.pump()
		go c.starter()
	}
	switch max := c.d.cfg.MaxStreamWatches; {
	case ws.byID[req.ID] != nil:
		ws.mu.Unlock()
		fail(fmt.Errorf("%w: watch id %d is in use on this connection", kv.ErrInvalidParam, req.ID))
		return
	case max > 0 && len(ws.byID) >= max:
		ws.mu.Unlock()
		fail(fmt.Errorf("%w: this connection has its maximum of %d watches; cancel one or open another connection",
			kv.ErrTooManyWatches, max))
		return
	}
	w.progress = sp.Progress()
	ws.needLeader = ws.needLeader || req.RequireLeader
	ws.byID[req.ID] = w
	ws.starts = append(ws.starts, pendingStart{w, sp})
	ws.mu.Unlock()
	select {
	case ws.kick <- struct{}{}:
	default:
	}
}

// starter opens the watches waiting to start, a batch at a time, until the
// connection ends.
func (c *streamConn) starter() {
	ws := &c.watches
	defer ws.wg.Done()
	for {
		select {
		case <-ws.kick:
		case <-ws.ctx.Done():
			ws.mu.Lock()
			for _, p := range ws.starts {
				delete(ws.byID, p.w.id)
			}
			ws.starts = nil
			ws.mu.Unlock()
			return
		}
		ws.mu.Lock()
		batch := ws.starts
		ws.starts = nil
		ws.mu.Unlock()
		// Serializable starts first: they wait for nothing.
		var barrier error
		waited := false
		for pass := 0; pass < 2; pass++ {
			for _, p := range batch {
				if p.sp.Linearizable() != (pass == 1) {
					continue
				}
				if pass == 1 && !waited {
					waited = true
					barrier = c.d.core.WaitLinearizable(ws.ctx)
				}
				if barrier != nil {
					c.started(p, nil, barrier)
					continue
				}
				watcher, err := c.d.core.OpenWatch(ws.ctx, p.sp) // the barrier, if any, is passed
				c.started(p, watcher, err)
			}
		}
	}
}

// started hands an opened watch to the pump, or answers why it could not start.
func (c *streamConn) started(p pendingStart, watcher *kv.Watch, err error) {
	ws := &c.watches
	w := p.w
	var rev int64
	if watcher != nil {
		rev = watcher.Revision
	}
	ws.mu.Lock()
	canceled := w.canceled
	if err != nil || canceled || ws.ctx.Err() != nil {
		delete(ws.byID, w.id)
		ws.mu.Unlock()
		var werr *fsm.WatchError
		switch {
		case err == nil:
			watcher.Close()
			if canceled {
				c.answer(&api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: rev,
					Reason: api.ReasonCanceled, Message: "the watch was canceled"})
			}
		case canceled:
			c.answer(&api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: max(p.sp.StartRevision()-1, 0),
				Reason: api.ReasonCanceled, Message: "the watch was canceled before it started"})
		case ws.ctx.Err() != nil:
		case errors.As(err, &werr) && errors.Is(err, fsm.ErrCompacted):
			c.answer(endFrame(w.id, err))
		default:
			e := kv.WireError(err, false)
			c.answer(&api.StreamResponse{ID: w.id, Op: api.StreamWatch, Err: &e})
		}
		return
	}
	w.watcher, w.live = watcher, true
	w.last = rev
	if start := p.sp.StartRevision(); start > 0 {
		w.last = start - 1
	}
	if w.progress > 0 {
		w.due = time.Now().Add(w.progress).UnixNano()
	}
	// Answered under ws.mu, so that no frame of the pump's overtakes it.
	c.answer(&api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchCreated, Revision: rev})
	ws.mu.Unlock()
	ws.markReady(w) // the replay of a past start_revision
}

// markReady queues w for the pump (any goroutine, without blocking).
func (ws *streamWatches) markReady(w *streamWatch) {
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

// pumpTick is how often the pump checks for due progress notifications.
const pumpTick = kv.MinWatchProgress / 2

// pump serves the connection's live watches until the connection ends.
func (c *streamConn) pump() {
	ws := &c.watches
	defer ws.wg.Done()
	tick := time.NewTicker(pumpTick)
	defer tick.Stop()
	done, cancel := context.WithCancel(context.Background())
	cancel() // a done context: Next polls
	var batch []*streamWatch
	for {
		select {
		case <-ws.wake:
		case now := <-tick.C:
			if c.progressDue(now) != nil || c.endLeaderless() != nil {
				return
			}
			continue
		case <-ws.ctx.Done():
			c.closeWatches()
			return
		}
		// A revision reaches the watches of a connection one notification at a
		// time: the round takes the watches that became ready while it served the
		// first ones too (a few times), so that one shared frame serves them all.
		for pass := 0; pass < maxRoundPasses; pass++ {
			ws.readyMu.Lock()
			batch, ws.ready = ws.ready, batch[:0]
			for _, w := range batch {
				w.queued = false
			}
			ws.readyMu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, w := range batch {
				if c.serveWatch(done, w) != nil {
					return
				}
			}
			clear(batch)
			if !ws.shared {
				break
			}
			runtime.Gosched()
		}
		if c.flushOut() != nil {
			return
		}
	}
}

// maxRoundPasses bounds the passes over newly ready watches in one pump round.
const maxRoundPasses = 4

// serveWatch writes what w's watcher has ready (pump). An error means the connection
// cannot be written to.
func (c *streamConn) serveWatch(done context.Context, w *streamWatch) error {
	ws := &c.watches
	ws.mu.Lock()
	live, canceled := w.live, w.canceled
	ws.mu.Unlock()
	if !live {
		return nil // starting (startWatch marks it ready again) or ended
	}
	if canceled {
		c.endWatch(w, &api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: w.last,
			Reason: api.ReasonCanceled, Message: "the watch was canceled"})
		return nil
	}
	for range 8 { // bounded: a busy watch yields to the others of the connection
		groups, err := w.watcher.Next(done)
		if err == nil {
			err = w.watcher.RightsLost()
		}
		switch {
		case err == nil:
			for _, g := range groups {
				if w.watcher.Filtered() {
					rev := g.Revision
					if g = allowedEvents(g, w.watcher.Allowed); g == nil {
						w.last = rev // nothing the token may read at rev
						continue
					}
				}
				c.queueEvents(w.id, g, w.prevKV)
				w.last = g.Revision
			}
			if err := c.flushOutIfLarge(); err != nil {
				return err
			}
		case errors.Is(err, context.Canceled): // nothing more for now
			return nil
		default:
			c.endWatch(w, endFrame(w.id, err))
			return nil
		}
	}
	ws.markReady(w)
	return nil
}

// progressDue writes the progress notifications that are due (pump).
func (c *streamConn) progressDue(now time.Time) error {
	ws := &c.watches
	ws.mu.Lock()
	var due []*streamWatch
	for _, w := range ws.byID {
		if w.live && !w.canceled && w.progress > 0 && now.UnixNano() >= w.due {
			due = append(due, w)
		}
	}
	ws.mu.Unlock()
	for _, w := range due {
		w.due = now.Add(w.progress).UnixNano()
		if rev, ok := w.watcher.Bookmark(); ok {
			w.last = max(w.last, rev)
			r := api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchProgress, Revision: rev}
			c.queueOut(api.AppendStreamResponse(ws.out, &r))
		}
	}
	return c.flushOut()
}

// queueEvents queues g's events frame for watch id (pump): at once, or, on a
// connection that takes shared frames, held until the round ends so that every watch
// of the round that gets g gets it in one frame.
func (c *streamConn) queueEvents(id uint64, g *fsm.RevisionEvents, prevKV bool) {
	ws := &c.watches
	k := encKey{g, prevKV}
	if !ws.shared {
		c.queueOut(api.AppendStreamWatchFrame(ws.out, id, g.Revision, c.encodeEvents(g, prevKV)))
		return
	}
	if i, ok := ws.pendIdx[k]; ok {
		ws.pend[i].ids = append(ws.pend[i].ids, id)
		return
	}
	if len(ws.pend) >= maxPendingGroups {
		c.flushEvents()
	}
	if ws.pendIdx == nil {
		ws.pendIdx = map[encKey]int{}
	}
	ws.pendIdx[k] = len(ws.pend)
	if len(ws.pend) < cap(ws.pend) { // reuse a slot's ids
		ws.pend = ws.pend[:len(ws.pend)+1]
		p := &ws.pend[len(ws.pend)-1]
		p.k, p.ids = k, append(p.ids[:0], id)
		return
	}
	ws.pend = append(ws.pend, pendingEvents{k: k, ids: []uint64{id}})
}

// flushEvents writes the held events frames into the round's frames, in revision
// order: each watch's groups have increasing revisions, so each watch still gets its
// frames in order (pump). Every other frame of a watch goes out through flushEvents
// first (endWatch, flushOut), after the events queued before it.
func (c *streamConn) flushEvents() {
	ws := &c.watches
	if len(ws.pend) == 0 {
		return
	}
	slices.SortStableFunc(ws.pend, func(a, b pendingEvents) int { return cmp.Compare(a.k.g.Revision, b.k.g.Revision) })
	for i := range ws.pend {
		p := &ws.pend[i]
		payload := c.encodeEvents(p.k.g, p.k.prevKV)
		if len(p.ids) == 1 {
			ws.out = api.AppendStreamWatchFrame(ws.out, p.ids[0], p.k.g.Revision, payload)
		} else {
			ws.out = api.AppendStreamSharedWatchFrame(ws.out, p.ids, p.k.g.Revision, payload)
		}
		p.k = encKey{}
	}
	ws.pend = ws.pend[:0]
	clear(ws.pendIdx)
}

// endLeaderless ends, with reason NoLeader, the watches that require a leader once
// the node has lost leader contact (pump): their clients resume on another node
// rather than wait, unknowing, for a partition to heal.
func (c *streamConn) endLeaderless() error {
	ws := &c.watches
	ws.mu.Lock()
	need := ws.needLeader
	ws.mu.Unlock()
	if !need {
		return nil
	}
	lost := c.d.core.LeaderContact()
	if lost == nil {
		return nil
	}
	var due []*streamWatch
	ws.mu.Lock()
	for _, w := range ws.byID {
		if w.live && !w.canceled && w.requireLeader {
			due = append(due, w)
		}
	}
	ws.mu.Unlock()
	for _, w := range due {
		c.endWatch(w, &api.StreamResponse{ID: w.id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: w.last,
			Reason: api.ReasonNoLeader, Message: "the node lost contact with the leader: " + lost.Error()})
	}
	return c.flushOut()
}

// endWatch writes w's last frame and forgets it (pump).
func (c *streamConn) endWatch(w *streamWatch, last *api.StreamResponse) {
	ws := &c.watches
	c.flushEvents()
	ws.mu.Lock()
	delete(ws.byID, w.id)
	w.live = false // Close below notifies once more
	ws.mu.Unlock()
	w.watcher.Close()
	c.queueOut(api.AppendStreamResponse(ws.out, last))
}

// closeWatches closes every live watcher when the connection ends (pump).
func (c *streamConn) closeWatches() {
	ws := &c.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for id, w := range ws.byID {
		if w.live {
			w.live = false
			w.watcher.Close()
			delete(ws.byID, id)
		}
	}
}

// queueOut keeps b (ws.out, possibly grown) as the frames of this pump round.
func (c *streamConn) queueOut(b []byte) { c.watches.out = b }

func (c *streamConn) flushOutIfLarge() error {
	if len(c.watches.out) < streamBufSize {
		return nil
	}
	return c.flushOut()
}

// flushOut hands the round's frames to the connection's writer in one write.
func (c *streamConn) flushOut() error {
	ws := &c.watches
	c.flushEvents()
	if len(ws.out) == 0 {
		return nil
	}
	err := c.answerBytes(ws.out)
	ws.out = ws.out[:0]
	if cap(ws.out) > 4*streamBufSize {
		ws.out = nil
	}
	return err
}

// endFrame is the end frame of watch id that ended with err.
func endFrame(id uint64, err error) *api.StreamResponse {
	line := kv.WatchEnd(err)
	return &api.StreamResponse{ID: id, Op: api.StreamWatch, Watch: api.StreamWatchEnd, Revision: line.Revision,
		CompactRevision: line.CompactRevision, Reason: line.Reason, Message: line.Message}
}

// stopWatches ends every watch of the connection and waits for the pump and the
// starter (serve's exit).
func (c *streamConn) stopWatches() {
	ws := &c.watches
	ws.mu.Lock()
	if ws.cancel != nil {
		ws.cancel()
	}
	ws.mu.Unlock()
	ws.wg.Wait()
	// A watch whose start finished after the pump left.
	c.closeWatches()
}

// allowedEvents returns g with only the events allow accepts: g itself when it keeps
// them all, a copy when it keeps some, nil when none.
func allowedEvents(g *fsm.RevisionEvents, allow func(key []byte) bool) *fsm.RevisionEvents {
	keep := 0
	for i := range g.Events {
		if allow(g.Events[i].KV.Key) {
			keep++
		}
	}
	switch keep {
	case len(g.Events):
		return g
	case 0:
		return nil
	}
	f := &fsm.RevisionEvents{Revision: g.Revision, Events: make([]fsm.Event, 0, keep)}
	for _, ev := range g.Events {
		if allow(ev.KV.Key) {
			f.Events = append(f.Events, ev)
		}
	}
	return f
}

// encodeEvents returns g's events as an events frame's payload, from the cache when
// another watch of the connection already encoded them (pump).
func (c *streamConn) encodeEvents(g *fsm.RevisionEvents, prevKV bool) []byte {
	ws := &c.watches
	k := encKey{g, prevKV}
	if b, ok := ws.enc[k]; ok {
		return b
	}
	evs := make([]api.StreamEvent, len(g.Events))
	for i := range g.Events {
		ev := &g.Events[i]
		evs[i] = api.StreamEvent{Type: api.EventPut, KV: kv.APIKV(ev.KV)}
		if ev.Type == fsm.EventDelete {
			evs[i].Type = api.EventDelete
		}
		if prevKV && ev.PrevKV != nil {
			p := kv.APIKV(*ev.PrevKV)
			evs[i].PrevKV = &p
		}
	}
	b := api.AppendStreamEvents(nil, evs)
	if ws.enc == nil {
		ws.enc = make(map[encKey][]byte, encCacheMax)
	}
	if len(ws.enc) >= encCacheMax {
		// Drop the older half: watches of a connection move forward together, the
		// laggards are the few that need an old revision again.
		var revs []int64
		for k := range ws.enc {
			revs = append(revs, k.g.Revision)
		}
		slices.Sort(revs)
		cut := revs[len(revs)/2]
		for k := range ws.enc {
			if k.g.Revision < cut {
				delete(ws.enc, k)
			}
		}
	}
	ws.enc[k] = b
	return b
}

// answerBytes queues ready-made frames, like answer, and returns the connection's
// write error.
func (c *streamConn) answerBytes(b []byte) error {
	c.wmu.Lock()
	if c.werr == nil {
		_, c.werr = c.bw.Write(b)
	}
	err := c.werr
	c.wmu.Unlock()
	select {
	case c.flush <- struct{}{}:
	default:
	}
	return err
}
