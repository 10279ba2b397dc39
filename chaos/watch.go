package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// The watch checker. A few watchers run through every scenario, each a Go client
// Watch over the workload's prefix that resumes by itself on another node when its
// node fails, goes silent or ends the stream (SlowWatcher). After the run, what each
// watcher received must be exactly the store's MVCC history of the prefix (the
// Timeline) from the watcher's start revision: every event, once, in revision order,
// the events of one revision in key order.
//
// A worked example, the history under k/ being
//
//	rev 5: put k/1=a    rev 6: put k/2=b, put k/3=c (one txn)    rev 7: delete k/1
//
// a watcher started at revision 6 must have received, in this order and nothing else,
//
//	6 PUT k/2 b, 6 PUT k/3 c, 7 DELETE k/1
//
// "6 PUT k/3, 6 PUT k/2" is out of order, "6 PUT k/2, 7 DELETE k/1" has a gap, and
// "6 PUT k/2, 6 PUT k/3, 6 PUT k/3, 7 DELETE k/1" a duplicate.
//
// A watch whose start revision is compacted (410) cannot be continued: the watcher
// says so, lists the prefix to learn the current revision R and watches again from
// R+1, as an informer relists. Each start is a WatchSegment, checked on its own.

// WatchedEvent is one change a watcher received (Value is empty for a delete).
type WatchedEvent struct {
	Rev   int64
	Type  string // api.EventPut or api.EventDelete
	Key   string
	Value string
}

func (e WatchedEvent) String() string {
	if e.Type == api.EventDelete {
		return fmt.Sprintf("%d %s %s", e.Rev, e.Type, e.Key)
	}
	return fmt.Sprintf("%d %s %s=%s", e.Rev, e.Type, e.Key, e.Value)
}

// WatchSegment is one Watch call: the events received from Start on. Through is the
// last revision the segment is known complete up to: the highest progress
// notification, or, for a segment that ended, its last event's revision as well.
type WatchSegment struct {
	Start, Through int64
	Events         []WatchedEvent
}

// WatchLog is what one watcher received and what happened to its streams.
type WatchLog struct {
	ID       int
	Segments []WatchSegment
	// Resumes counts the streams that ended and were resumed by the client (a node
	// killed, paused or cut off, a stream the server ended); Slow counts those the
	// server ended itself (SlowWatcher, Restored), NoLeader those a node ended on
	// losing leader contact (the watchers require a leader).
	Resumes, Slow, NoLeader int
	// Compacted counts starts refused as compacted (410), each followed by a relist
	// and a new segment.
	Compacted int
	// Err is why the watch ended for good before the run was over ("" when it ran
	// to the end).
	Err string
}

// Events counts the events of every segment.
func (l *WatchLog) Events() int {
	n := 0
	for _, s := range l.Segments {
		n += len(s.Events)
	}
	return n
}

// WatchCounts is what CheckWatches counted, for the run's summary.
type WatchCounts struct {
	Watchers, MinEvents, Resumes, Slow, NoLeader, Compacted int
}

// Watchers runs a run's watchers from StartWatchers until Stop.
type Watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	logf   func(string, ...any)
	mu     struct {
		sync.Mutex
		logs []*WatchLog
	}
}

// watchProgress is the watchers' progress interval: a stream silent for three of
// them (plus the dial timeout) is taken as a dead node and resumed elsewhere.
const watchProgress = time.Second

// StartWatchers starts n watchers of prefix, each with its own client of every member
// (each listing the members from a different one): even ones from revision 1 over the
// stream protocol (many watches on one connection, shared events frames, a node that
// loses its leader ends them), odd ones from the revision after the current one over
// HTTP. Backends that do not expose their nodes' HTTP addresses get no watchers (and
// the watch floor fails).
func StartWatchers(ctx context.Context, c Cluster, prefix string, n int, logf func(string, ...any)) *Watchers {
	ctx, cancel := context.WithCancel(ctx)
	ws := &Watchers{cancel: cancel, logf: logf}
	addrs, ok := c.(interface{ HTTPAddr(id string) string })
	if !ok {
		logf("watchers: the %s backend does not expose HTTP addresses: no watchers", c.Name())
		return ws
	}
	members := c.Members()
	for i := 0; i < n; i++ {
		var list []string
		for j := range members {
			list = append(list, addrs.HTTPAddr(members[(i+j)%len(members)]))
		}
		cl, err := client.New(list, client.Options{MaxRetries: 2, MinBackoff: 20 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, DialTimeout: time.Second, TLS: tlsFor(list[0]), Token: clusterToken(c),
			Stream: i%2 == 0})
		if err != nil {
			logf("watcher %d: %v", i, err)
			continue
		}
		start := int64(1)
		if i%2 == 1 {
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := cl.List(sctx, prefix, client.ListOptions{Limit: 1})
			scancel()
			if err != nil {
				logf("watcher %d: list for its start revision: %v", i, err)
				continue
			}
			start = resp.Revision + 1
		}
		l := &WatchLog{ID: i}
		ws.mu.Lock()
		ws.mu.logs = append(ws.mu.logs, l)
		ws.mu.Unlock()
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			defer cl.Close() // its stream connections
			ws.run(ctx, cl, prefix, start, l)
		}()
	}
	return ws
}

// run watches prefix from start until ctx ends, relisting after a compacted start.
func (ws *Watchers) run(ctx context.Context, cl *client.Client, prefix string, start int64, l *WatchLog) {
	for ctx.Err() == nil {
		ws.mu.Lock()
		l.Segments = append(l.Segments, WatchSegment{Start: start, Through: start - 1})
		seg := &l.Segments[len(l.Segments)-1]
		ws.mu.Unlock()
		err := ws.segment(ctx, cl, prefix, start, l, seg)
		switch {
		case ctx.Err() != nil:
			return
		case client.IsCompacted(err):
			ws.logf("watcher %d: start revision %d compacted (%v): relist and watch again", l.ID, start, err)
			rev, lerr := relist(ctx, cl, prefix)
			ws.mu.Lock()
			l.Compacted++
			if lerr != nil {
				l.Err = "relist after a compacted start: " + lerr.Error()
			}
			ws.mu.Unlock()
			if lerr != nil {
				return
			}
			start = rev + 1
		default:
			ws.mu.Lock()
			l.Err = fmt.Sprintf("watch ended: %v", err)
			ws.mu.Unlock()
			return
		}
	}
}

// segment runs one Watch from start, recording into seg, and returns how it ended.
func (ws *Watchers) segment(ctx context.Context, cl *client.Client, prefix string, start int64, l *WatchLog, seg *WatchSegment) error {
	onResume := func(err error) {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		l.Resumes++
		switch {
		case errors.Is(err, client.ErrWatchEnded) && strings.Contains(err.Error(), api.ReasonNoLeader):
			l.NoLeader++
			ws.logf("watcher %d: its node lost the leader, resuming elsewhere: %v", l.ID, err)
		case errors.Is(err, client.ErrWatchEnded):
			l.Slow++
			ws.logf("watcher %d: ended by the server, resuming: %v", l.ID, err)
		}
	}
	// A watcher on a node cut off from the leader moves to another node rather than
	// fall behind until the partition heals.
	ch := cl.Watch(ctx, prefix, client.WatchOptions{StartRevision: start, Progress: watchProgress, OnResume: onResume,
		RequireLeader: true})
	for ev := range ch {
		ws.mu.Lock()
		switch ev.Type {
		case api.EventPut, api.EventDelete:
			e := WatchedEvent{Rev: ev.Revision, Type: ev.Type, Key: ev.KV.Key}
			if ev.Type == api.EventPut {
				e.Value = string(ev.KV.Value)
			}
			seg.Events = append(seg.Events, e)
		case api.EventProgress:
			seg.Through = max(seg.Through, ev.Revision)
		}
		ws.mu.Unlock()
		if ev.Err != nil {
			ws.mu.Lock()
			if n := len(seg.Events); n > 0 {
				seg.Through = max(seg.Through, seg.Events[n-1].Rev)
			}
			ws.mu.Unlock()
			return ev.Err
		}
	}
	return ctx.Err()
}

// relist learns the prefix's current revision, as an informer's list after a 410.
func relist(ctx context.Context, cl *client.Client, prefix string) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cl.List(lctx, prefix, client.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return resp.Revision, nil
}

// Stop waits until every watcher that is still running has a progress notification
// at or past revision to (at most wait), then ends the watches and returns what
// each received. to <= 0 stops at once.
func (ws *Watchers) Stop(to int64, wait time.Duration) []WatchLog {
	deadline := time.Now().Add(wait)
	for to > 0 && time.Now().Before(deadline) && !ws.caughtUp(to) {
		time.Sleep(100 * time.Millisecond)
	}
	ws.cancel()
	ws.wg.Wait()
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]WatchLog, 0, len(ws.mu.logs))
	for _, l := range ws.mu.logs {
		out = append(out, *l)
	}
	return out
}

// lastWatched is the newest revision any watcher received events through.
func lastWatched(logs []WatchLog) int64 {
	var last int64
	for _, l := range logs {
		for _, seg := range l.Segments {
			last = max(last, seg.Through)
			for _, ev := range seg.Events {
				last = max(last, ev.Rev)
			}
		}
	}
	return last
}

func (ws *Watchers) caughtUp(to int64) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, l := range ws.mu.logs {
		if l.Err == "" && (len(l.Segments) == 0 || l.Segments[len(l.Segments)-1].Through < to) {
			return false
		}
	}
	return true
}

// CheckWatches checks every watcher's events against the MVCC history tl of prefix:
// each segment received exactly the history's events from its start to its Through,
// the last one up to the end of the history; nothing after it. It also checks the
// floors (f.Watchers watchers, each with at least f.WatchEvents events) and reports a
// watch that ended for good.
func CheckWatches(logs []WatchLog, tl *Timeline, prefix string, f Floors) (WatchCounts, []string) {
	var out []string
	cnt := WatchCounts{Watchers: len(logs), MinEvents: -1}
	if len(logs) < f.Watchers {
		out = append(out, fmt.Sprintf("floor: %d watchers ran, want >= %d", len(logs), f.Watchers))
	}
	for i := range logs {
		l := &logs[i]
		cnt.Resumes, cnt.Slow, cnt.Compacted = cnt.Resumes+l.Resumes, cnt.Slow+l.Slow, cnt.Compacted+l.Compacted
		cnt.NoLeader += l.NoLeader
		if n := l.Events(); cnt.MinEvents < 0 || n < cnt.MinEvents {
			cnt.MinEvents = n
		}
		if n := l.Events(); n < f.WatchEvents {
			out = append(out, fmt.Sprintf("floor: watcher %d received %d events, want >= %d", l.ID, n, f.WatchEvents))
		}
		if l.Err != "" {
			out = append(out, fmt.Sprintf("watcher %d: %s", l.ID, l.Err))
		}
		if tl == nil {
			continue
		}
		for si, seg := range l.Segments {
			last := si == len(l.Segments)-1
			out = append(out, checkSegment(l.ID, seg, last && l.Err == "", tl, prefix)...)
		}
	}
	if len(logs) > 0 && tl == nil {
		out = append(out, "no MVCC history was read: no watcher was checked")
	}
	return cnt, out
}

// checkSegment compares one segment with the history. final says the segment ran to
// the end of the run, so it must reach the end of the history.
func checkSegment(id int, seg WatchSegment, final bool, tl *Timeline, prefix string) []string {
	var out []string
	name := fmt.Sprintf("watcher %d (from revision %d)", id, seg.Start)
	to := min(seg.Through, tl.To)
	if final && seg.Through < tl.To {
		out = append(out, fmt.Sprintf("%s: up to date only through revision %d, the history ends at %d: not caught up after healing", name, seg.Through, tl.To))
	}
	from := seg.Start
	if !tl.Complete() {
		from = max(from, tl.From+1) // the history cannot say what From itself changed
	}
	var got []WatchedEvent
	for _, e := range seg.Events {
		switch {
		case e.Rev > tl.To:
			out = append(out, fmt.Sprintf("%s: event %s after the end of the history (%d)", name, e, tl.To))
		case e.Rev >= from && e.Rev <= to:
			got = append(got, e)
		}
	}
	if p := outOfOrder(got); p != "" {
		out = append(out, name+": out of order: "+p)
	}
	if p := duplicated(got); p != "" {
		out = append(out, name+": duplicate: "+p)
	}
	if p := diffEvents(got, historyEvents(tl, prefix, from, to)); p != "" {
		out = append(out, name+": "+p)
	}
	return out
}

// historyEvents lists the history's changes under prefix in [from, to], in revision
// order and, within a revision, key order.
func historyEvents(tl *Timeline, prefix string, from, to int64) []WatchedEvent {
	var out []WatchedEvent
	for r := from; r <= to; r++ {
		ch := tl.Changes[r]
		if ch == nil {
			continue
		}
		var evs []WatchedEvent
		for k, v := range ch.Puts {
			if strings.HasPrefix(k, prefix) {
				evs = append(evs, WatchedEvent{Rev: r, Type: api.EventPut, Key: k, Value: v})
			}
		}
		for _, k := range ch.Deletes {
			if strings.HasPrefix(k, prefix) {
				evs = append(evs, WatchedEvent{Rev: r, Type: api.EventDelete, Key: k})
			}
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].Key < evs[j].Key })
		out = append(out, evs...)
	}
	return out
}

// outOfOrder names the first event that comes after one it should precede.
func outOfOrder(evs []WatchedEvent) string {
	for i := 1; i < len(evs); i++ {
		a, b := evs[i-1], evs[i]
		if b.Rev < a.Rev || b.Rev == a.Rev && b.Key < a.Key {
			return fmt.Sprintf("event #%d %s after %s", i, b, a)
		}
	}
	return ""
}

// duplicated names the first event received twice.
func duplicated(evs []WatchedEvent) string {
	seen := make(map[WatchedEvent]int, len(evs))
	for i, e := range evs {
		if j, ok := seen[e]; ok {
			return fmt.Sprintf("event #%d %s already received as #%d", i, e, j)
		}
		seen[e] = i
	}
	return ""
}

// diffEvents names the first difference between what a watcher got and the history.
func diffEvents(got, want []WatchedEvent) string {
	inWant := make(map[WatchedEvent]bool, len(want))
	for _, e := range want {
		inWant[e] = true
	}
	for i := 0; i < len(got) || i < len(want); i++ {
		switch {
		case i >= len(got):
			return fmt.Sprintf("gap: %d events of the history never received, the first %s", len(want)-i, want[i])
		case i >= len(want):
			return fmt.Sprintf("%d events received beyond the history, the first #%d %s", len(got)-i, i, got[i])
		case got[i] == want[i]:
		case !inWant[got[i]]:
			return fmt.Sprintf("event #%d %s is not in the history (want %s)", i, got[i], want[i])
		default:
			return fmt.Sprintf("gap: event #%d is %s, want %s", i, got[i], want[i])
		}
	}
	return ""
}
