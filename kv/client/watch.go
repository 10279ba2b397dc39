package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// WatchOptions configures Watch. The zero value watches every key under the prefix
// from the revision after the latest one, with a linearizable start.
type WatchOptions struct {
	// Key watches the exact key given instead of the prefix.
	Key bool
	// StartRevision is the first revision to deliver (0 = after the latest). It must be
	// above the compact revision: after a list at revision R, watch from R+1.
	StartRevision int64
	// PrevKV adds each event's previous version of the key.
	PrevKV bool
	// Progress is the interval of the server's progress lines (default 5s); a stream
	// silent for three intervals is taken as a dead node and resumed elsewhere.
	Progress time.Duration
	// Serializable starts the watch from the answering node's state without first
	// catching up with the leader's commit index.
	Serializable bool
	// Buffer is the capacity of the returned channel (default 128).
	Buffer int
	// RequireLeader (etcd's WithRequireLeader): a node cut off from the leader
	// refuses the watch, and ends it within a tick of losing contact (reason NoLeader),
	// so the watch resumes on another node instead of falling behind unnoticed until
	// the partition heals. Over the stream protocol and over HTTP, on nodes of this
	// release or later; an older node runs the watch without it.
	RequireLeader bool
	// OnResume, when set, is called from the watch's goroutine each time a stream
	// ended and the watch is about to resume from the first revision it has not
	// delivered: err says why (errors.Is(err, ErrWatchEnded) when the server ended it,
	// as a slow watcher; a broken or silent stream otherwise). It must not block.
	OnResume func(err error)
}

// WatchEvent is one change (Type api.EventPut or api.EventDelete), a progress
// notification (api.EventProgress: every event up to Revision has been delivered), or,
// last before the channel closes, the reason the watch ended (Err set). KV.Value and
// PrevKV are read-only: over the stream protocol, watches of one connection that get
// the same revision share its decoded events.
type WatchEvent struct {
	Type     string
	KV       api.KV
	PrevKV   *api.KV
	Revision int64
	// Err ends the watch: a 410 (IsCompacted: restart with a list), another 4xx, or
	// ctx's error.
	Err error
}

// Watch streams the changes of every key under prefix (of key alone with opts.Key) in
// revision order, with no gap and no duplicate, until ctx is done or the watch fails
// for good. The events of one revision are sent together. When the node it reads from
// fails, ends the watch (slow reader, snapshot install) or goes silent, Watch resumes
// by itself on the next node from the first revision it has not delivered. A revision
// cut by a broken connection is never delivered in part: its events are held until
// the revision's last one has arrived.
//
// The channel closes after the final event; the caller must drain it or cancel ctx.
func (c *Client) Watch(ctx context.Context, prefix string, opts WatchOptions) <-chan WatchEvent {
	if opts.Progress <= 0 {
		opts.Progress = 5 * time.Second
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 128
	}
	ch := make(chan WatchEvent, opts.Buffer)
	go func() {
		defer close(ch)
		err := c.watchLoop(ctx, prefix, opts, ch)
		select {
		case ch <- WatchEvent{Err: err}:
		case <-ctx.Done():
		}
	}()
	return ch
}

// watchLoop runs watch streams, resuming after each failure that allows it.
func (c *Client) watchLoop(ctx context.Context, prefix string, opts WatchOptions, ch chan<- WatchEvent) error {
	next := opts.StartRevision
	for attempt := 0; ; attempt++ {
		idx := int(c.cur.Load()) % len(c.addrs)
		progressed, err := c.watchOn(ctx, c.addrs[idx], prefix, opts, &next, ch)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e, ok := asError(err); ok && e.Code >= 400 && e.Code < 500 && e.Code != http.StatusTooManyRequests {
			return err
		}
		c.cur.CompareAndSwap(uint32(idx), uint32((idx+1)%len(c.addrs)))
		if opts.OnResume != nil {
			opts.OnResume(err)
		}
		if progressed {
			attempt = 0
		}
		if serr := sleep(ctx, c.backoff(attempt, 0)); serr != nil {
			return serr
		}
	}
}

// watchOn runs one stream on base: over the stream protocol with Options.Stream when
// the node offers it, over HTTP otherwise — also when the node refuses the stream
// watch with a 400 (a release whose stream protocol predates watches).
func (c *Client) watchOn(ctx context.Context, base, prefix string, opts WatchOptions, next *int64,
	ch chan<- WatchEvent) (bool, error) {
	if c.opts.Stream {
		sc, err := c.streamTo(ctx, base)
		switch {
		case err == nil:
			progressed, err := c.watchOnceStream(ctx, sc, prefix, opts, next, ch)
			var refused *watchRefusedError
			if !errors.As(err, &refused) || refused.err.Code != http.StatusBadRequest {
				return progressed, err
			}
		case !errors.Is(err, errNoStream):
			return false, err
		}
	}
	return c.watchOnce(ctx, base, prefix, opts, next, ch)
}

// ErrWatchEnded marks a stream the server ended with a resumable END line (reason
// SlowWatcher or Restored); the watch resumes by itself.
var ErrWatchEnded = errors.New("client: watch ended by the server")

// watchOnce runs one stream from *next on base, delivering complete revisions and
// advancing *next past each. progressed says whether anything was delivered.
func (c *Client) watchOnce(ctx context.Context, base, prefix string, opts WatchOptions, next *int64,
	ch chan<- WatchEvent) (progressed bool, err error) {
	q := url.Values{}
	if !opts.Key {
		q.Set(api.ParamPrefix, "true")
	}
	if *next > 0 {
		q.Set(api.ParamStartRevision, strconv.FormatInt(*next, 10))
	}
	if opts.PrevKV {
		q.Set(api.ParamPrevKV, "true")
	}
	if opts.Serializable {
		q.Set(api.ParamConsistency, api.ConsistencySerializable)
	}
	q.Set(api.ParamProgress, opts.Progress.String())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A silent stream (a paused or cut-off node sends no FIN) is abandoned.
	silence := time.AfterFunc(3*opts.Progress+c.opts.DialTimeout, cancel)
	defer silence.Stop()
	req, err := http.NewRequestWithContext(sctx, http.MethodGet,
		base+api.PathWatch+strings.ReplaceAll(url.PathEscape(prefix), ".", "%2E")+"?"+q.Encode(), nil)
	if err != nil {
		return false, fmt.Errorf("client: %w", err)
	}
	c.authorize(req)
	if opts.RequireLeader {
		req.Header.Set(api.HeaderRequireLeader, "true") // ignored by an older node
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("client: watch %q: %w", prefix, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, readError(resp)
	}
	if *next == 0 {
		rev, err := strconv.ParseInt(resp.Header.Get(api.HeaderRevision), 10, 64)
		if err != nil {
			return false, fmt.Errorf("client: watch %q: %w: no revision header", prefix, errBrokenResponse)
		}
		*next = rev + 1
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	var pending []WatchEvent // the current revision's events, until its last one
	for sc.Scan() {
		silence.Reset(3*opts.Progress + c.opts.DialTimeout)
		var line api.WatchEvent
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return progressed, fmt.Errorf("client: watch %q: %w: %v", prefix, errBrokenResponse, err)
		}
		switch line.Type {
		case api.EventPut, api.EventDelete:
			if line.Revision < *next || line.KV == nil {
				return progressed, fmt.Errorf("client: watch %q: %w: event at %d, expected >= %d",
					prefix, errBrokenResponse, line.Revision, *next)
			}
			pending = append(pending, WatchEvent{Type: line.Type, KV: *line.KV, PrevKV: line.PrevKV, Revision: line.Revision})
			if line.Remaining > 0 {
				continue
			}
			for _, ev := range pending {
				select {
				case ch <- ev:
				case <-ctx.Done():
					return progressed, ctx.Err()
				}
			}
			pending, progressed = pending[:0], true
			*next = line.Revision + 1
		case api.EventProgress:
			if line.Revision+1 > *next {
				*next = line.Revision + 1
			}
			select {
			case ch <- WatchEvent{Type: line.Type, Revision: line.Revision}:
			case <-ctx.Done():
				return progressed, ctx.Err()
			}
		case api.EventEnd:
			if line.Reason == api.ReasonResourceExpired {
				return progressed, &Error{Code: http.StatusGone, Reason: line.Reason, Message: line.Message,
					CompactRevision: line.CompactRevision}
			}
			if line.Revision+1 > *next {
				*next = line.Revision + 1
			}
			return true, fmt.Errorf("%w: %s: %s", ErrWatchEnded, line.Reason, line.Message)
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return progressed, fmt.Errorf("client: watch %q: stream broken: %w", prefix, err)
}
