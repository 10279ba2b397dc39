package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Watches over the stream protocol (api/stream_watch.go): with Options.Stream, every
// watch of the client to one node shares that node's stream connection with the
// single-key requests. The read loop never blocks on a watch: it queues the watch's
// frames, and a watch whose reader falls maxWatchFrames behind is resumed (from the
// first revision it has not delivered) as the server would resume a slow watcher.

// maxWatchFrames bounds the frames queued for one watch and not yet handled.
const maxWatchFrames = 4096

// errWatchBacklog: the watch's consumer fell too far behind; the watch resumes.
var errWatchBacklog = errors.New("client: watch consumer too slow, resuming")

// watchSub is one watch's frames, queued by the read loop.
type watchSub struct {
	mu    sync.Mutex
	queue []*api.StreamResponse // shared with the other watches of a shared frame: read-only
	err   error
	wake  chan struct{} // cap 1
}

func (s *watchSub) push(r *api.StreamResponse) {
	s.mu.Lock()
	if s.err == nil {
		if len(s.queue) >= maxWatchFrames {
			s.err = errWatchBacklog
		} else {
			s.queue = append(s.queue, r)
		}
	}
	s.mu.Unlock()
	s.signal()
}

func (s *watchSub) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.signal()
}

func (s *watchSub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the queued frames, then the sub's error once they are all taken.
func (s *watchSub) take() ([]*api.StreamResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queue; len(q) > 0 {
		s.queue = nil
		return q, nil
	}
	return nil, s.err
}

// watch sends a watch request (its ID is set here) and returns its subscription.
func (c *streamConn) watch(req *api.StreamRequest) (*watchSub, error) {
	sub := &watchSub{wake: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, &notSentError{err}
	}
	c.nextID++
	req.ID = c.nextID
	if c.watches == nil {
		c.watches = map[uint64]*watchSub{}
	}
	c.watches[req.ID] = sub
	c.mu.Unlock()
	c.send(req)
	return sub, nil
}

// cancelWatch stops delivering watch id and asks the server to end it.
func (c *streamConn) cancelWatch(id uint64) {
	c.mu.Lock()
	_, ok := c.watches[id]
	delete(c.watches, id)
	dead := c.err != nil
	c.mu.Unlock()
	if ok && !dead {
		c.send(&api.StreamRequest{ID: id, Op: api.StreamWatchCancel})
	}
}

// send queues req's frame for the flusher.
func (c *streamConn) send(req *api.StreamRequest) {
	c.wmu.Lock()
	_, err := c.bw.Write(api.AppendStreamRequest(c.bw.AvailableBuffer(), req))
	c.wmu.Unlock()
	if err != nil {
		c.fail(err)
	}
	select {
	case c.flush <- struct{}{}:
	default:
	}
}

// deliverWatch hands a watch answer to watch id's subscription (read loop); an end
// or an error is the watch's last frame. The frame of a shared events answer goes to
// every watch it names.
func (c *streamConn) deliverWatch(id uint64, r *api.StreamResponse) {
	c.mu.Lock()
	sub := c.watches[id]
	if sub != nil && (r.Err != nil || r.Watch == api.StreamWatchEnd) {
		delete(c.watches, id)
	}
	c.mu.Unlock()
	if sub != nil {
		sub.push(r)
	}
}

// failWatches fails every watch of a dead connection (with c.mu held).
func (c *streamConn) failWatchesLocked() {
	for id, sub := range c.watches {
		sub.fail(c.err)
		delete(c.watches, id)
	}
}

// watchOnceStream is watchOnce over the stream connection sc.
func (c *Client) watchOnceStream(ctx context.Context, sc *streamConn, prefix string, opts WatchOptions, next *int64,
	ch chan<- WatchEvent) (progressed bool, err error) {
	req := api.StreamRequest{Op: api.StreamWatch, Key: []byte(prefix), Revision: *next, Prefix: !opts.Key,
		PrevKV: opts.PrevKV, Serializable: opts.Serializable, Progress: opts.Progress,
		RequireLeader: opts.RequireLeader && sc.requireLeader}
	sub, err := sc.watch(&req)
	if err != nil {
		return false, err
	}
	defer sc.cancelWatch(req.ID)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A silent stream (a paused or cut-off node sends no FIN) is abandoned.
	quiet := 3*opts.Progress + c.opts.DialTimeout
	silence := time.AfterFunc(quiet, cancel)
	defer silence.Stop()
	created := false
	send := func(ev WatchEvent) error {
		select { // the common case, without the cost of a two-way select
		case ch <- ev:
			return nil
		default:
		}
		select {
		case ch <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		frames, err := sub.take()
		if err != nil {
			return progressed, fmt.Errorf("client: watch %q: stream broken: %w", prefix, err)
		}
		if len(frames) == 0 {
			select {
			case <-sub.wake:
				continue
			case <-sctx.Done():
				if ctx.Err() != nil {
					return progressed, ctx.Err()
				}
				return progressed, fmt.Errorf("client: watch %q: stream silent for %v", prefix, quiet)
			}
		}
		silence.Reset(quiet)
		for _, f := range frames {
			if f.Err != nil {
				if !created {
					return progressed, &watchRefusedError{f.Err}
				}
				return progressed, f.Err
			}
			switch f.Watch {
			case api.StreamWatchCreated:
				created = true
				if *next == 0 {
					*next = f.Revision + 1
				}
			case api.StreamWatchEvents:
				if f.Revision < *next {
					return progressed, fmt.Errorf("client: watch %q: %w: event at %d, expected >= %d",
						prefix, errBrokenResponse, f.Revision, *next)
				}
				for _, ev := range f.Events {
					if err := send(WatchEvent{Type: ev.Type, KV: ev.KV, PrevKV: ev.PrevKV, Revision: f.Revision}); err != nil {
						return progressed, err
					}
				}
				progressed = true
				*next = f.Revision + 1
			case api.StreamWatchProgress:
				if f.Revision+1 > *next {
					*next = f.Revision + 1
				}
				if err := send(WatchEvent{Type: api.EventProgress, Revision: f.Revision}); err != nil {
					return progressed, err
				}
			case api.StreamWatchEnd:
				if f.Reason == api.ReasonResourceExpired {
					return progressed, &Error{Code: http.StatusGone, Reason: f.Reason, Message: f.Message,
						CompactRevision: f.CompactRevision}
				}
				if f.Revision+1 > *next {
					*next = f.Revision + 1
				}
				return true, fmt.Errorf("%w: %s: %s", ErrWatchEnded, f.Reason, f.Message)
			}
		}
	}
}

// watchRefusedError: the node answered a stream watch request with an error before
// creating it. A 400 is what a node of a release that predates stream watches answers
// (unknown op); the same watch is then asked over HTTP, which gives a new node's 400
// again for a request that is really bad.
type watchRefusedError struct{ err *api.Error }

func (e *watchRefusedError) Error() string { return e.err.Error() }
func (e *watchRefusedError) Unwrap() error { return e.err }
