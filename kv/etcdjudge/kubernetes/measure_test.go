package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// measureWorkers is how many clients create ConfigMaps at once.
const measureWorkers = 16

// TestKubeAPIServerMeasure measures a kube-apiserver on a 3-node keel against one on
// a 3-member Debian etcd 3.4, one after the other on the same machine: ConfigMap
// creates (16 workers: throughput, p50/p99), a paged list (limit 500, resourceVersion
// "": a consistent read) at each count in KEEL_K8S_MEASURE_COUNTS (default 10000;
// the time of the first page, median of 5, and of the whole list), and watch latency
// (one writer; from just before a create to its event, p50/p99).
//
// The watch cache is off for ConfigMaps (--watch-cache-sizes=configmaps#0) on both,
// so lists and watches reach the store: kube-apiserver 1.37 has no
// ConsistentListFromCache gate any more (it went GA and was removed); it serves a
// consistent list from its cache whenever the store supports RequestWatchProgress,
// which it assumes of keel (it reports etcd 3.6.0) and not of etcd 3.4.23 (< 3.4.31).
// With the cache on, the two would not be measuring the same thing.
//
// Runs only with KEEL_K8S_MEASURE=1.
func TestKubeAPIServerMeasure(t *testing.T) {
	if os.Getenv("KEEL_K8S_MEASURE") != "1" {
		t.Skip("KEEL_K8S_MEASURE=1 runs the measurements")
	}
	counts := []int{10000}
	if v := os.Getenv("KEEL_K8S_MEASURE_COUNTS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 || len(counts) > 0 && n <= counts[len(counts)-1] {
				t.Fatalf("KEEL_K8S_MEASURE_COUNTS=%q: want increasing counts", v)
			}
			counts = append(counts, n)
		}
	}
	skipWithoutEtcd34(t)
	bin := kubeAPIServerBinary(t)
	var results [2]measurement
	t.Run("keel3", func(t *testing.T) { results[0] = measureKubeAPIServer(t, bin, startKeelCluster(t), counts) })
	t.Run("etcd34", func(t *testing.T) { results[1] = measureKubeAPIServer(t, bin, startEtcd34Cluster(t, 3), counts) })
	t.Logf("\n%s", measureTable(results[0], results[1]))
}

// measurement is one backend's figures.
type measurement struct {
	creates   []createRun
	lists     []listRun
	watchP50  time.Duration
	watchP99  time.Duration
	watchN    int
	loadStart string
	loadEnd   string
}

type createRun struct {
	from, to int
	wall     time.Duration
	p50, p99 time.Duration
	errs     int64
}

type listRun struct {
	count          int
	firstPage      time.Duration // median of 5
	whole          time.Duration
	pages, objects int
	storageOps     []string // ConfigMap list requests kube-apiserver made to the store for the 5 first pages
}

// storageListRequests is kube-apiserver's etcd_requests_total for ConfigMaps by
// operation, list operations only (list, listStream, listWithCount, listOnlyKeys).
func storageListRequests(ctx context.Context, t *testing.T, kube kubernetes.Interface) map[string]float64 {
	t.Helper()
	b, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	ops := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "etcd_requests_total{") || !strings.Contains(line, `resource="configmaps"`) {
			continue
		}
		_, op, _ := strings.Cut(line, `operation="`)
		op, _, _ = strings.Cut(op, `"`)
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil && strings.HasPrefix(op, "list") {
			ops[op] += n
		}
	}
	return ops
}

func measureKubeAPIServer(t *testing.T, bin string, c *cluster, counts []int) measurement {
	m := measurement{loadStart: loadavg()}
	s := startKubeAPIServer(t, bin, c, "--watch-cache-sizes=configmaps#0")
	ctx := context.Background()
	for _, ns := range []string{"bench", "bench-watch"} {
		if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	have := 0
	for i, n := range counts {
		cr := createConfigMaps(ctx, s.kube, "bench", have, n)
		t.Logf("%s: created %d..%d in %v (%.0f/s, p50 %v, p99 %v, %d errors)", c.kind, cr.from, cr.to, cr.wall.Round(time.Millisecond),
			float64(cr.to-cr.from)/cr.wall.Seconds(), cr.p50, cr.p99, cr.errs)
		if cr.errs > 0 {
			t.Errorf("%d creates failed", cr.errs)
		}
		m.creates = append(m.creates, cr)
		have = n
		lr := listConfigMaps(ctx, t, s.kube, "bench", n)
		t.Logf("%s: list of %d: first page %v, all %d pages %v; store requests for the 5 first pages: %v",
			c.kind, n, lr.firstPage, lr.pages, lr.whole.Round(time.Millisecond), lr.storageOps)
		m.lists = append(m.lists, lr)
		if i == 0 {
			m.watchN = 1000
			m.watchP50, m.watchP99 = watchLatency(ctx, t, s.kube, "bench-watch", m.watchN)
			t.Logf("%s: watch latency over %d creates: p50 %v, p99 %v", c.kind, m.watchN, m.watchP50, m.watchP99)
		}
	}
	m.loadEnd = loadavg()
	return m
}

// createConfigMaps creates bench-<from>..bench-<to-1> with measureWorkers workers.
func createConfigMaps(ctx context.Context, kube kubernetes.Interface, ns string, from, to int) createRun {
	var next atomic.Int64
	next.Store(int64(from))
	lat := make([][]time.Duration, measureWorkers)
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range measureWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(to); i = next.Add(1) - 1 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%06d", i)},
					Data: map[string]string{"payload": strings.Repeat("x", 100)}}
				t0 := time.Now()
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	all := slices.Concat(lat...)
	return createRun{from: from, to: to, wall: time.Since(start), p50: percentile(all, 50), p99: percentile(all, 99), errs: errs.Load()}
}

// listConfigMaps times the first page (limit 500, resourceVersion "") five times,
// then the whole paged list, which must hold want objects.
func listConfigMaps(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, want int) listRun {
	t.Helper()
	before := storageListRequests(ctx, t, kube)
	var firsts []time.Duration
	for range 5 {
		t0 := time.Now()
		if _, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 500}); err != nil {
			t.Fatalf("list first page: %v", err)
		}
		firsts = append(firsts, time.Since(t0))
	}
	r := listRun{count: want, firstPage: percentile(firsts, 50)}
	after := storageListRequests(ctx, t, kube)
	for op, n := range after {
		if n > before[op] {
			r.storageOps = append(r.storageOps, fmt.Sprintf("%s +%.0f", op, n-before[op]))
		}
	}
	slices.Sort(r.storageOps)
	if len(r.storageOps) == 0 {
		t.Errorf("5 first-page lists of %d made no ConfigMap list request to the store (etcd_requests_total): served from the watch cache?", want)
	}
	t0 := time.Now()
	for cont := ""; ; {
		l, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			t.Fatalf("list page %d: %v", r.pages, err)
		}
		r.pages++
		r.objects += len(l.Items)
		if cont = l.Continue; cont == "" {
			break
		}
	}
	r.whole = time.Since(t0)
	if r.objects != want {
		t.Errorf("paged list returned %d ConfigMaps, want %d", r.objects, want)
	}
	return r
}

// watchLatency opens a watch on ns, creates n ConfigMaps there one after another,
// and returns the p50 and p99 of the time from just before each create to its ADDED
// event.
func watchLatency(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, n int) (p50, p99 time.Duration) {
	t.Helper()
	l, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wi, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Stop()
	sent := make([]time.Time, n)
	var mu sync.Mutex
	seen := make(chan time.Duration, n)
	go func() {
		for ev := range wi.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != watch.Added || !ok {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(cm.Name, "w-"))
			if err != nil || i >= n {
				continue
			}
			mu.Lock()
			seen <- time.Since(sent[i])
			mu.Unlock()
		}
	}()
	for i := range n {
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", i)}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create w-%d: %v", i, err)
		}
	}
	var lat []time.Duration
	timeout := time.After(time.Minute)
	for len(lat) < n {
		select {
		case d := <-seen:
			lat = append(lat, d)
		case <-timeout:
			t.Fatalf("%d of %d watch events within a minute", len(lat), n)
		}
	}
	return percentile(lat, 50), percentile(lat, 99)
}

// percentile is the p-th percentile of ds (nearest rank), 0 for none; ds is sorted.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[(len(ds)*p+99)/100-1]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// measureTable is a Markdown table of keel's figures next to etcd's.
func measureTable(k, e measurement) string {
	var b strings.Builder
	row := func(what, kv, ev string, ratio float64) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f |\n", what, kv, ev, ratio)
	}
	b.WriteString("| | 3-node keel | 3-member etcd 3.4.23 | keel/etcd |\n|---|---|---|---|\n")
	for i := range k.creates {
		kc, ec := k.creates[i], e.creates[i]
		kr, er := float64(kc.to-kc.from)/kc.wall.Seconds(), float64(ec.to-ec.from)/ec.wall.Seconds()
		what := fmt.Sprintf("create %d..%d, %d workers", kc.from, kc.to, measureWorkers)
		row(what+": ConfigMaps/s", fmt.Sprintf("%.0f", kr), fmt.Sprintf("%.0f", er), kr/er)
		row(what+": p50", ms(kc.p50), ms(ec.p50), ratio(kc.p50, ec.p50))
		row(what+": p99", ms(kc.p99), ms(ec.p99), ratio(kc.p99, ec.p99))
	}
	for i := range k.lists {
		kl, el := k.lists[i], e.lists[i]
		row(fmt.Sprintf("list at %d: first page of 500 (median of 5)", kl.count), ms(kl.firstPage), ms(el.firstPage), ratio(kl.firstPage, el.firstPage))
		row(fmt.Sprintf("list at %d: all %d pages", kl.count, kl.pages), ms(kl.whole), ms(el.whole), ratio(kl.whole, el.whole))
	}
	row(fmt.Sprintf("watch latency, create → ADDED (%d, one writer): p50", k.watchN), ms(k.watchP50), ms(e.watchP50), ratio(k.watchP50, e.watchP50))
	row("watch latency: p99", ms(k.watchP99), ms(e.watchP99), ratio(k.watchP99, e.watchP99))
	fmt.Fprintf(&b, "\nload average (1/5/15 min) at start and end: keel %s → %s; etcd %s → %s\n", k.loadStart, k.loadEnd, e.loadStart, e.loadEnd)
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
