package kubernetes

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// configMapWatch follows the ConfigMaps of one namespace the way a reflector does:
// list (resourceVersion "", a consistent read), watch from the list's
// resourceVersion, watch again from the last resourceVersion seen when the server
// closes the stream, and list again only when the watch answers 410 Gone (the
// resourceVersion was compacted or fell out of the watch cache). Every name listed or
// seen in an event is recorded, and every event's resourceVersion is checked to be
// above the previous one (a bookmark's may equal it).
//
// Only run touches the state while it runs; read it through snapshot.
type configMapWatch struct {
	kube kubernetes.Interface
	ns   string

	mu struct {
		sync.Mutex
		seen       map[string]bool
		events     int // ADDED, MODIFIED, DELETED
		bookmarks  int
		lists      int      // the first list and every relist
		rewatches  int      // watches re-opened after the server closed one
		startErrs  []string // list or watch requests that failed (retried)
		gone       []string // 410 answers, each followed by a relist
		errors     []string // ERROR events other than 410: a failure of the judge
		outOfOrder []string // events whose resourceVersion did not go up
		lastRV     uint64
	}
}

func newConfigMapWatch(kube kubernetes.Interface, ns string) *configMapWatch {
	w := &configMapWatch{kube: kube, ns: ns}
	w.mu.seen = map[string]bool{}
	return w
}

// run follows the namespace until ctx ends.
func (w *configMapWatch) run(ctx context.Context) {
	rv, relist := "", true
	for ctx.Err() == nil {
		if relist {
			var err error
			if rv, err = w.list(ctx); err != nil {
				w.note(&w.mu.startErrs, "list: %v", err)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			relist = false
		}
		wi, err := w.kube.CoreV1().ConfigMaps(w.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			w.note(&w.mu.gone, "watch from %s: %v", rv, err)
			relist = true
			continue
		}
		if err != nil {
			w.note(&w.mu.startErrs, "watch from %s: %v", rv, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		rv, relist = w.follow(ctx, wi, rv)
		wi.Stop()
		if !relist && ctx.Err() == nil {
			w.mu.Lock()
			w.mu.rewatches++
			w.mu.Unlock()
		}
	}
}

// list records every ConfigMap listed and returns the list's resourceVersion.
func (w *configMapWatch) list(ctx context.Context) (string, error) {
	l, err := w.kube.CoreV1().ConfigMaps(w.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		return "", fmt.Errorf("list resourceVersion %q: %w", l.ResourceVersion, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.lists++
	for _, cm := range l.Items {
		w.mu.seen[cm.Name] = true
	}
	w.mu.lastRV = rv
	return l.ResourceVersion, nil
}

// follow reads wi until it closes; it returns the resourceVersion to watch from next,
// and relist when the server answered 410 Gone. The error event client-go makes of
// the stream's end once ctx is done is not the server's and is ignored.
func (w *configMapWatch) follow(ctx context.Context, wi watch.Interface, rv string) (next string, relist bool) {
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error && ctx.Err() != nil {
			return rv, false
		}
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				w.note(&w.mu.gone, "watch event from %s: %v", rv, err)
				return rv, true
			}
			w.note(&w.mu.errors, "watch event from %s: %v", rv, err)
			return rv, false
		}
		obj, err := meta.Accessor(ev.Object)
		if err != nil {
			w.note(&w.mu.errors, "%s event of %T: %v", ev.Type, ev.Object, err)
			continue
		}
		evRV, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
		if err != nil {
			w.note(&w.mu.errors, "%s event resourceVersion %q: %v", ev.Type, obj.GetResourceVersion(), err)
			continue
		}
		w.mu.Lock()
		if evRV < w.mu.lastRV || evRV == w.mu.lastRV && ev.Type != watch.Bookmark {
			w.mu.outOfOrder = append(w.mu.outOfOrder, fmt.Sprintf("%s %s at %d after %d", ev.Type, obj.GetName(), evRV, w.mu.lastRV))
		}
		w.mu.lastRV = evRV
		if ev.Type == watch.Bookmark {
			w.mu.bookmarks++
		} else {
			w.mu.events++
			if _, ok := ev.Object.(*corev1.ConfigMap); ok {
				w.mu.seen[obj.GetName()] = true
			}
		}
		w.mu.Unlock()
		rv = obj.GetResourceVersion()
	}
	return rv, false
}

func (w *configMapWatch) note(to *[]string, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	*to = append(*to, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// watchReport is a copy of a configMapWatch's state.
type watchReport struct {
	seen                                map[string]bool
	events, bookmarks, lists, rewatches int
	startErrs, gone, errors, outOfOrder []string
}

func (w *configMapWatch) snapshot() watchReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := watchReport{seen: map[string]bool{}, events: w.mu.events, bookmarks: w.mu.bookmarks, lists: w.mu.lists,
		rewatches: w.mu.rewatches, startErrs: append([]string(nil), w.mu.startErrs...), gone: append([]string(nil), w.mu.gone...),
		errors: append([]string(nil), w.mu.errors...), outOfOrder: append([]string(nil), w.mu.outOfOrder...)}
	for k := range w.mu.seen {
		r.seen[k] = true
	}
	return r
}
