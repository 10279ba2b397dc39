package etcdctl

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// backend is one server the sessions run against: keel's etcd door or a real etcd.
type backend struct {
	name string
	addr string // host:port of its etcd API
	c    *clientv3.Client
}

func newBackend(name, addr string) (*backend, error) {
	c, err := newClient(addr)
	if err != nil {
		return nil, fmt.Errorf("%s client: %w", name, err)
	}
	return &backend{name: name, addr: addr, c: c}, nil
}

func (b *backend) close() { b.c.Close() }

// revision is the backend's current revision (a Range's header).
func (b *backend) revision(ctx context.Context) (int64, error) {
	resp, err := b.c.Get(ctx, "\x01judge-nothing")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// writes records the revisions of a session's writes: every event under the
// session's prefix, seen by a watch that starts before the session's first step.
// They are what revisions are normalised against (rankOf). On keel the revisions
// between them belong to keel's hidden records.
type writes struct {
	b      *backend
	c      *clientv3.Client // its own: a session's watch stream is not shared with another's
	cancel context.CancelFunc
	wc     clientv3.WatchChan
	start  int64 // the backend's revision before the session

	mu       sync.Mutex
	revs     []int64 // increasing
	progress int64   // every event up to this revision has been seen
}

// watchWrites starts recording the writes under prefix.
func watchWrites(ctx context.Context, b *backend, prefix string) (*writes, error) {
	start, err := b.revision(ctx)
	if err != nil {
		return nil, err
	}
	c, err := newClient(b.addr)
	if err != nil {
		return nil, err
	}
	// RequestProgress finds the watch's stream by the context's metadata: none on both.
	wctx, cancel := context.WithCancel(context.Background())
	w := &writes{b: b, c: c, cancel: cancel, start: start}
	w.wc = c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(start+1), clientv3.WithProgressNotify())
	go w.loop()
	return w, nil
}

func (w *writes) loop() {
	for resp := range w.wc {
		w.mu.Lock()
		for _, ev := range resp.Events {
			if n := len(w.revs); n == 0 || w.revs[n-1] < ev.Kv.ModRevision {
				w.revs = append(w.revs, ev.Kv.ModRevision)
			}
		}
		if resp.IsProgressNotify() { // an event response's header may run ahead of its catch-up
			w.progress = max(w.progress, resp.Header.Revision)
		}
		w.mu.Unlock()
	}
}

func (w *writes) stop() { w.cancel(); w.c.Close() }

// sync returns once every write up to the backend's current revision is recorded.
func (w *writes) sync(ctx context.Context) error {
	rev, err := w.b.revision(ctx)
	if err != nil || rev == w.start {
		// Nothing written since the session began: the watch starts in the future,
		// and etcd answers no progress request of such a watch (it starts at
		// start+1).
		return err
	}
	for {
		w.mu.Lock()
		done := w.progress >= rev
		w.mu.Unlock()
		if done {
			return nil
		}
		if err := w.c.RequestProgress(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: writes up to revision %d not seen: %w", w.b.name, rev, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rank is the number of the session's writes at or below rev: the revision as the
// session's history numbers it, the same on both backends whatever gaps keel's own
// records leave.
func (w *writes) rank(rev int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, found := slices.BinarySearch(w.revs, rev)
	if found {
		n++
	}
	return n
}
