package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WatchDriver is what the watch workload needs of a system beyond Driver. Both
// drivers implement it.
type WatchDriver interface {
	// Watch watches every key under prefix on node from revision from (0 = from
	// now) and calls deliver with the value of each put, from one goroutine per
	// watch, until ctx ends or the watch fails (the error; nil when ctx ended).
	Watch(ctx context.Context, node int, prefix string, from int64, deliver func(val []byte)) error
}

// Watch for keel: the Go client's Watch over the stream protocol (Options.Stream),
// one client per member dedicated to watches, so every watch to a member shares one
// connection, as etcd's clientv3 multiplexes them on one gRPC stream.
func (d *keelDriver) Watch(ctx context.Context, node int, prefix string, from int64, deliver func([]byte)) error {
	cl := d.watchClient(node)
	for ev := range cl.Watch(ctx, prefix, client.WatchOptions{StartRevision: from, Buffer: 1024}) {
		switch {
		case ev.Err != nil && ctx.Err() != nil:
			return nil
		case ev.Err != nil:
			return ev.Err
		case ev.Type == api.EventPut:
			deliver(ev.KV.Value)
		}
	}
	return nil
}

func (d *keelDriver) watchClient(node int) *client.Client {
	d.watchMu.Lock()
	defer d.watchMu.Unlock()
	if d.watchers == nil {
		d.watchers = map[int]*client.Client{}
	}
	if c := d.watchers[node]; c != nil {
		return c
	}
	tr := &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:       16,
		DisableCompression: true,
	}
	c, err := client.New([]string{d.bases[node]}, client.Options{HTTPClient: &http.Client{Transport: tr}, Stream: true})
	if err != nil {
		panic(fmt.Sprintf("keel client: %v", err)) // only on a bad address
	}
	d.watchers[node] = c
	return c
}

// Watch for etcd: clientv3's Watch on one client (one gRPC connection) per member
// dedicated to watches; clientv3 multiplexes every watch of that client onto one
// gRPC stream, as the Kubernetes API server does.
func (d *etcdDriver) Watch(ctx context.Context, node int, prefix string, from int64, deliver func([]byte)) error {
	cli, err := d.watchClient(node)
	if err != nil {
		return err
	}
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from))
	}
	for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, opts...) {
		if err := resp.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				deliver(ev.Kv.Value)
			}
		}
	}
	return nil
}

func (d *etcdDriver) watchClient(node int) (*clientv3.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watchers == nil {
		d.watchers = map[int]*clientv3.Client{}
	}
	if c := d.watchers[node]; c != nil {
		return c, nil
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{d.endpoints[node]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: d.tls})
	if err != nil {
		return nil, err
	}
	d.watchers[node] = c
	return c, nil
}

// watchStats is what one fan-out run measured.
type watchStats struct {
	watchers        int
	writes          int64   // acknowledged writes in the measured window
	delivered       int64   // events received by all watchers in the window
	perSec          float64 // delivered / window
	p50Ms, p99Ms    float64 // put sent → event received, over the events of the window
	missing         int64   // events of acknowledged writes never received (after a drain)
	watchErrs       int64
	firstWatchError string
}

// fanWatcher is one watcher's tally; deliver runs on its watch's goroutine only.
type fanWatcher struct {
	got  atomic.Int64 // every event since the start
	lats []time.Duration
}

// watchFanOut: watchers watchers of one prefix spread over the members (watcher w on
// member w%3), all from one revision; one writer (one client connection) puts to the
// leader with inflight puts outstanding, each value carrying its send time. Events delivered per second and the delivery
// latency (send → receipt) are measured over the window after warm-up; then the
// writer stops and every watcher must receive every acknowledged write.
func (s *suite) watchFanOut(ctx context.Context, d Driver, lead, inflight int) (watchStats, error) {
	wd, ok := d.(WatchDriver)
	if !ok {
		return watchStats{}, errors.New("driver cannot watch")
	}
	st := watchStats{watchers: s.cfg.watchers}
	from, err := d.Revision(ctx, lead)
	if err != nil {
		return st, err
	}
	from++
	var mStart, mEnd atomic.Int64 // the window, ns since the epoch (0 = not yet)
	ws := make([]*fanWatcher, s.cfg.watchers)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	for i := range ws {
		fw := &fanWatcher{}
		ws[i] = fw
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := wd.Watch(wctx, i%3, "f/", from, func(val []byte) {
				now := time.Now().UnixNano()
				fw.got.Add(1)
				if len(val) < 8 {
					return
				}
				if a, b := mStart.Load(), mEnd.Load(); a != 0 && now >= a && (b == 0 || now <= b) {
					fw.lats = append(fw.lats, time.Duration(now-int64(binary.BigEndian.Uint64(val))))
				}
			})
			if err != nil {
				errMu.Lock()
				st.watchErrs++
				if st.firstWatchError == "" {
					st.firstWatchError = err.Error()
				}
				errMu.Unlock()
			}
		}()
	}
	put := func(key string, val []byte) error {
		binary.BigEndian.PutUint64(val, uint64(time.Now().UnixNano()))
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		defer pcancel()
		return d.Put(pctx, lead, 0, key, val)
	}
	// Every watcher established: each has an event of a "ready" write.
	var acked int64
	deadline := time.Now().Add(2 * time.Minute)
	for !all(ws, 1) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			errMu.Lock()
			defer errMu.Unlock()
			return st, fmt.Errorf("watchers not established after 2m (%d errors, first: %s)", st.watchErrs, st.firstWatchError)
		}
		if err := put("f/ready", make([]byte, s.cfg.valBytes)); err != nil {
			return st, fmt.Errorf("ready write: %w", err)
		}
		acked++
		time.Sleep(200 * time.Millisecond)
	}
	// One writer — one client, one connection — with inflight puts outstanding (1:
	// back to back): warm-up, then the measured window.
	start := time.Now()
	mStart.Store(start.Add(s.cfg.warm).UnixNano())
	mEnd.Store(start.Add(s.cfg.warm + s.cfg.watchDur).UnixNano())
	var n, ackedW, writes atomic.Int64
	var werr error
	var wwg sync.WaitGroup
	for range max(1, inflight) {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			val := make([]byte, s.cfg.valBytes)
			for time.Since(start) < s.cfg.warm+s.cfg.watchDur && ctx.Err() == nil {
				t := time.Now().UnixNano()
				if err := put(fmt.Sprintf("f/%07d", n.Add(1)-1), val); err != nil {
					errMu.Lock()
					if werr == nil {
						werr = fmt.Errorf("write: %w", err)
					}
					errMu.Unlock()
					return
				}
				ackedW.Add(1)
				if t >= mStart.Load() && t <= mEnd.Load() {
					writes.Add(1)
				}
			}
		}()
	}
	wwg.Wait()
	if werr != nil {
		return st, werr
	}
	st.writes = writes.Load()
	// Drain: every watcher gets every acknowledged write.
	want := acked + ackedW.Load()
	// Progress every 5 s tells a slow delivery (the count grows) from a stall.
	for drain, next := time.Now().Add(30*time.Second), time.Now().Add(5*time.Second); !all(ws, want) && time.Now().Before(drain); {
		time.Sleep(50 * time.Millisecond)
		if time.Now().After(next) {
			next = next.Add(5 * time.Second)
			var got int64
			for _, fw := range ws {
				got += min(fw.got.Load(), want)
			}
			log.Printf("[%s] watch drain: %d of %d events delivered", s.res.System, got, want*int64(len(ws)))
		}
	}
	cancel()
	wg.Wait()
	var lats []time.Duration
	for _, fw := range ws {
		lats = append(lats, fw.lats...)
		st.missing += max(0, want-fw.got.Load())
	}
	st.delivered = int64(len(lats))
	st.perSec = float64(st.delivered) / s.cfg.watchDur.Seconds()
	if len(lats) > 0 {
		slices.Sort(lats)
		pct := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))]) / float64(time.Millisecond) }
		st.p50Ms, st.p99Ms = pct(0.50), pct(0.99)
	}
	return st, nil
}

func all(ws []*fanWatcher, n int64) bool {
	for _, fw := range ws {
		if fw.got.Load() < n {
			return false
		}
	}
	return true
}

// watchIdleMemory starts idle watchers of a prefix nobody writes (after one event
// each, to know they are established) on member node, and returns how much that
// member's VmRSS grew, in MiB per 10,000 watchers.
func (s *suite) watchIdleMemory(ctx context.Context, cl Cluster, node int) (float64, error) {
	d := cl.Driver()
	wd, ok := d.(WatchDriver)
	if !ok {
		return 0, errors.New("driver cannot watch")
	}
	pid := cl.PIDs()[node]
	time.Sleep(3 * time.Second)
	before, err := readMem(pid)
	if err != nil {
		return 0, err
	}
	from, err := d.Revision(ctx, node)
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws := make([]*fanWatcher, s.cfg.idleWatchers)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range ws {
		fw := &fanWatcher{}
		ws[i] = fw
		wg.Add(1)
		go func() {
			defer wg.Done()
			if wd.Watch(wctx, node, "idle/", from+1, func([]byte) { fw.got.Add(1) }) != nil {
				failed.Add(1)
			}
		}()
	}
	defer wg.Wait()
	defer cancel()
	if err := d.Put(ctx, node, 0, "idle/ready", []byte("x")); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(3 * time.Minute); !all(ws, 1); {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("%d idle watchers not established after 3m (%d failed)", s.cfg.idleWatchers, failed.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	after, err := readMem(pid)
	if err != nil {
		return 0, err
	}
	grew := float64(after.VmRSS) - float64(before.VmRSS)
	return grew / (1 << 20) * 10_000 / float64(s.cfg.idleWatchers), nil
}

// watch runs the watch workloads on a fresh cluster: idle memory first, while the
// servers' memory holds nothing but start-up (after the fan-out, both runtimes are
// still returning its garbage to the OS, which RSS growth would count as negative),
// then the fan-out.
func (s *suite) watch(ctx context.Context, cl Cluster, lead int) {
	mb, err := s.watchIdleMemory(ctx, cl, lead)
	if err != nil {
		s.fail("watch idle memory", err)
		return
	}
	s.res.Metrics["watch.idle_mb_per_10k"] = mb
	s.note("idle watchers: %d on the leader, VmRSS grew %.1f MiB per 10k watchers", s.cfg.idleWatchers, mb)
	// The fan-out three times: with the writer's puts back to back (the rate is then
	// that of one client's round trips), with 16 outstanding on its connection (a
	// system whose watchers keep up is bound by its put latency under the load), and
	// with watchInflight outstanding (64: enough that what the servers and watchers
	// deliver is the bound — the target is on this run).
	for _, run := range []struct {
		inflight int
		prefix   string
	}{{1, "watch.b2b."}, {16, "watch.w16."}, {max(1, s.cfg.watchInflight), "watch."}} {
		wait := s.profileCPU(ctx, fmt.Sprintf("fanout%d", run.inflight), lead, 3*time.Second, int(s.cfg.watchDur.Seconds()))
		st, err := s.watchFanOut(ctx, cl.Driver(), lead, run.inflight)
		wait()
		if err != nil {
			s.fail("watch fan-out", err)
			return
		}
		s.res.Metrics[run.prefix+"events_per_sec"] = st.perSec
		s.res.Metrics[run.prefix+"p50_ms"] = st.p50Ms
		s.res.Metrics[run.prefix+"p99_ms"] = st.p99Ms
		s.res.Metrics[run.prefix+"missing"] = float64(st.missing)
		s.note("watch fan-out: %d watchers, 1 writer with %d puts in flight, %d writes in %v, %d events delivered (%.0f/s), delivery p50 %.2fms p99 %.2fms, %d missing, %d watch errors %s",
			st.watchers, run.inflight, st.writes, s.cfg.watchDur, st.delivered, st.perSec, st.p50Ms, st.p99Ms, st.missing, st.watchErrs, st.firstWatchError)
		if st.missing > 0 {
			s.fail("watch fan-out", fmt.Errorf("%d events of acknowledged writes never delivered", st.missing))
		}
	}
}
