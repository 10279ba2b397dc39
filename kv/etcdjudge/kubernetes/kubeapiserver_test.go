package kubernetes

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// TestKubeAPIServerOnKeel is judge 2: a real kube-apiserver binary (the module's
// k8s.io/kubernetes/cmd/kube-apiserver) with --etcd-servers at all three nodes of a
// keel cluster, driven with client-go. It stores namespaces, a CRD and objects of it,
// a Deployment and ConfigMaps; then, with a ConfigMap watch open and a writer
// creating ConfigMaps one after another, keel's leader is killed (SIGKILL) and
// restarted, then each other node in turn. It runs with kube-apiserver's watch cache
// (the client's watch is served from the cache, which holds one store watch per
// resource) and without it (-nowatchcache: the client's watch is a store watch).
// It checks that no acknowledged create is lost (each is listed at the
// end, and was seen by the watch or by a relist after a 410), that resourceVersions
// on the watch only go up, that the only watch errors are 410s a relist recovers,
// that each create's resourceVersion exceeds the one before it (the writer is
// sequential), and that the CRD objects and the Deployment read back and update.
// The control runs the same against a 3-member Debian etcd 3.4.
//
// It runs when KEEL_K8S_PKGS matches "kube-apiserver" (or is unset).
func TestKubeAPIServerOnKeel(t *testing.T) {
	if !regexp.MustCompile(os.Getenv("KEEL_K8S_PKGS")).MatchString("kube-apiserver") {
		t.Skip("KEEL_K8S_PKGS does not match kube-apiserver")
	}
	bin := kubeAPIServerBinary(t)
	t.Run("keel3", func(t *testing.T) { judgeKubeAPIServer(t, bin, startKeelCluster(t)) })
	t.Run("keel3-nowatchcache", func(t *testing.T) { judgeKubeAPIServer(t, bin, startKeelCluster(t), "--watch-cache=false") })
	t.Run("etcd34", func(t *testing.T) {
		skipWithoutEtcd34(t)
		judgeKubeAPIServer(t, bin, startEtcd34Cluster(t, 3))
	})
	t.Run("etcd34-nowatchcache", func(t *testing.T) {
		skipWithoutEtcd34(t)
		judgeKubeAPIServer(t, bin, startEtcd34Cluster(t, 3), "--watch-cache=false")
	})
}

const (
	judgeNS     = "judge"      // ConfigMaps, watched
	judgeObjNS  = "judge-objs" // the CRD's objects and the Deployment
	widgetGroup = "judge.keel.dev"
	widgetCount = 5
)

var widgets = schema.GroupVersionResource{Group: widgetGroup, Version: "v1", Resource: "widgets"}

// judgeKubeAPIServer is one run of judge 2 on c, kube-apiserver started with flags.
func judgeKubeAPIServer(t *testing.T, bin string, c *cluster, flags ...string) {
	s := startKubeAPIServer(t, bin, c, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, ns := range []string{judgeNS, judgeObjNS} {
		if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	createWidgets(ctx, t, s)
	createDeployment(ctx, t, s)

	w := newConfigMapWatch(s.kube, judgeNS)
	wr := &configMapWriter{kube: s.kube, ns: judgeNS}
	watchCtx, stopWatch := context.WithCancel(ctx)
	writeCtx, stopWrite := context.WithCancel(ctx)
	watching, writing := make(chan struct{}), make(chan struct{})
	go func() { defer close(watching); w.run(watchCtx) }()
	go func() { defer close(writing); wr.run(writeCtx) }()
	defer func() { stopWrite(); stopWatch(); <-writing; <-watching }()

	killEveryMember(t, c, wr)
	stopWrite()
	<-writing
	written := wr.report()
	caughtUp := waitSeen(w, written.acked, time.Minute)
	stopWatch()
	<-watching
	checkConfigMaps(ctx, t, s, written, w.snapshot(), caughtUp)
	checkWidgets(ctx, t, s)
	checkDeployment(ctx, t, s)
	if err := s.readyz(); err != nil {
		t.Errorf("kube-apiserver /readyz at the end: %v", err)
	}
}

// killEveryMember SIGKILLs and restarts c's members while wr writes: the leader
// first (down 3 s, with 50 creates acknowledged before and after), then each other
// member (down 1 s, 20 creates after each), so that each store connection
// kube-apiserver holds, the watch's among them wherever its client's balancer put
// it, is cut once.
func killEveryMember(t *testing.T, c *cluster, wr *configMapWriter) {
	t.Helper()
	wr.waitAcked(t, 50, time.Minute)
	leader, _ := c.waitLeader(t, 30*time.Second)
	before := wr.report().acked
	t.Logf("%d creates acknowledged; SIGKILL %s leader %s, restart after 3s", len(before), c.kind, leader.name)
	start := time.Now()
	c.killAndRestart(t, leader, 3*time.Second)
	t.Logf("%s %s restarted and a leader elected %v after the kill; %d creates acknowledged meanwhile",
		c.kind, leader.name, time.Since(start).Round(time.Millisecond), len(wr.report().acked)-len(before))
	wr.waitAcked(t, len(wr.report().acked)+50, time.Minute)
	for _, m := range c.members {
		if m == leader {
			continue
		}
		t.Logf("SIGKILL %s %s, restart after 1s", c.kind, m.name)
		c.killAndRestart(t, m, time.Second)
		wr.waitAcked(t, len(wr.report().acked)+20, time.Minute)
	}
}

// waitSeen waits until the watch has seen every name in acked (in an event or a
// relist) and reports whether it did within d.
func waitSeen(w *configMapWatch, acked []ack, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		seen := w.snapshot().seen
		if !slices.ContainsFunc(acked, func(a ack) bool { return !seen[a.name] }) {
			return true
		}
	}
	return false
}

// checkConfigMaps: every acknowledged create is in the final list and was seen by the
// watch; the watch's resourceVersions went up; its only errors were 410s, each
// followed by a relist; the writer's acknowledged resourceVersions went up.
func checkConfigMaps(ctx context.Context, t *testing.T, s *kubeAPIServer, written writerReport, r watchReport, caughtUp bool) {
	t.Helper()
	l, err := s.kube.CoreV1().ConfigMaps(judgeNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("final list: %v", err)
	}
	listed := map[string]bool{}
	for _, cm := range l.Items {
		listed[cm.Name] = true
	}
	var lost, unseen []string
	for _, a := range written.acked {
		if !listed[a.name] {
			lost = append(lost, a.name)
		}
		if !r.seen[a.name] {
			unseen = append(unseen, a.name)
		}
	}
	var failedPresent []string
	for _, name := range written.failed {
		if listed[name] {
			failedPresent = append(failedPresent, name)
		}
	}
	t.Logf("writer: %d creates acknowledged, %d failed (%d of those stored anyway: %v); first errors: %v",
		len(written.acked), len(written.failed), len(failedPresent), failedPresent, first(written.errs, 5))
	t.Logf("watch: %d events, %d bookmarks, %d lists (%d relists), %d re-watches after a close, %d failed list/watch requests %v, 410s: %v",
		r.events, r.bookmarks, r.lists, r.lists-1, r.rewatches, len(r.startErrs), first(r.startErrs, 5), r.gone)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged creates not listed at the end: %v", len(lost), first(lost, 20))
	}
	if len(unseen) > 0 || !caughtUp {
		t.Errorf("%d acknowledged creates never seen by the watch nor a relist: %v", len(unseen), first(unseen, 20))
	}
	if len(r.outOfOrder) > 0 {
		t.Errorf("watch resourceVersions did not go up: %v", first(r.outOfOrder, 20))
	}
	if len(r.errors) > 0 {
		t.Errorf("watch errors other than 410 Gone: %v", first(r.errors, 20))
	}
	if r.lists-1 != len(r.gone) {
		t.Errorf("%d relists for %d 410s", r.lists-1, len(r.gone))
	}
	for i := 1; i < len(written.acked); i++ {
		if a, b := written.acked[i-1], written.acked[i]; b.rv <= a.rv {
			t.Errorf("create %s acknowledged at resourceVersion %d after %s at %d", b.name, b.rv, a.name, a.rv)
		}
	}
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("... %d more", len(s)-n))
	}
	return s
}

// ack is an acknowledged create: the ConfigMap's name and the resourceVersion the
// server answered.
type ack struct {
	name string
	rv   uint64
}

// configMapWriter creates ConfigMaps cm-00000, cm-00001, ... in one namespace, one
// after another, each with a 30-second timeout; a failed create is recorded (it may
// or may not have been stored) and the next name is tried 100 ms later.
type configMapWriter struct {
	kube kubernetes.Interface
	ns   string
	mu   struct {
		sync.Mutex
		writerReport
	}
}

// writerReport is what a configMapWriter did, in order.
type writerReport struct {
	acked  []ack
	failed []string // names whose create returned an error
	errs   []string
}

// run creates ConfigMaps until ctx ends.
func (wr *configMapWriter) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("cm-%05d", i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := wr.kube.CoreV1().ConfigMaps(wr.ns).Create(cctx, cm, metav1.CreateOptions{})
		cancel()
		if ctx.Err() != nil {
			return // a create cut short by the end of the run is neither acked nor failed
		}
		var rv uint64
		if err == nil {
			rv, err = strconv.ParseUint(out.ResourceVersion, 10, 64)
		}
		wr.mu.Lock()
		if err == nil {
			wr.mu.acked = append(wr.mu.acked, ack{name: name, rv: rv})
		} else {
			wr.mu.failed = append(wr.mu.failed, name)
			wr.mu.errs = append(wr.mu.errs, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), name, err))
		}
		wr.mu.Unlock()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// report is a copy of what the writer did so far.
func (wr *configMapWriter) report() writerReport {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return writerReport{acked: slices.Clone(wr.mu.acked), failed: slices.Clone(wr.mu.failed), errs: slices.Clone(wr.mu.errs)}
}

// waitAcked waits until n creates are acknowledged; the test fails after d.
func (wr *configMapWriter) waitAcked(t *testing.T, n int, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); len(wr.report().acked) < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			r := wr.report()
			t.Fatalf("%d creates acknowledged within %v, want %d; errors: %v", len(r.acked), d, n, first(r.errs, 10))
		}
	}
}

// createWidgets creates the CRD widgets.judge.keel.dev (namespaced, v1, any spec),
// waits until it is Established and serving, and creates widget-0..4 in judgeObjNS.
func createWidgets(ctx context.Context, t *testing.T, s *kubeAPIServer) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: widgets.Resource + "." + widgetGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgetGroup,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: widgets.Resource, Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
	if _, err := s.crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	for i := range widgetCount {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": widgetGroup + "/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("widget-%d", i)},
			"spec":     map[string]any{"size": int64(i)},
		}}
		var err error
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			// NotFound until the CRD is established and its handler installed.
			_, err = s.dynamic.Resource(widgets).Namespace(judgeObjNS).Create(ctx, obj, metav1.CreateOptions{})
			if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("create widget-%d: %v", i, err)
		}
	}
}

// checkWidgets: the CRD and its objects read back, each with its spec.size.
func checkWidgets(ctx context.Context, t *testing.T, s *kubeAPIServer) {
	t.Helper()
	if _, err := s.crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, widgets.Resource+"."+widgetGroup, metav1.GetOptions{}); err != nil {
		t.Errorf("get CRD: %v", err)
	}
	l, err := s.dynamic.Resource(widgets).Namespace(judgeObjNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list widgets: %v", err)
	}
	if len(l.Items) != widgetCount {
		t.Errorf("%d widgets listed, want %d", len(l.Items), widgetCount)
	}
	for i := range widgetCount {
		name := fmt.Sprintf("widget-%d", i)
		obj, err := s.dynamic.Resource(widgets).Namespace(judgeObjNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get %s: %v", name, err)
			continue
		}
		if size, _, _ := unstructured.NestedInt64(obj.Object, "spec", "size"); size != int64(i) {
			t.Errorf("%s spec.size = %d, want %d", name, size, i)
		}
	}
}

// createDeployment stores a Deployment "web" (2 replicas of pause); no controller
// runs, so it stays as written.
func createDeployment(ctx context.Context, t *testing.T, s *kubeAPIServer) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(judgeObjNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
}

// checkDeployment: the Deployment reads back as written, and scales to 3 (a
// read-modify-write through the store).
func checkDeployment(ctx context.Context, t *testing.T, s *kubeAPIServer) {
	t.Helper()
	d, err := s.kube.AppsV1().Deployments(judgeObjNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Deployment: %v", err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != "registry.k8s.io/pause:3.10" {
		t.Errorf("Deployment read back with %d replicas of %s, want 2 of registry.k8s.io/pause:3.10",
			*d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
	}
	d.Spec.Replicas = ptr(int32(3))
	if _, err := s.kube.AppsV1().Deployments(judgeObjNS).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Errorf("scale Deployment: %v", err)
	}
	if d, err = s.kube.AppsV1().Deployments(judgeObjNS).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Errorf("get Deployment after scaling: %v", err)
	} else if *d.Spec.Replicas != 3 {
		t.Errorf("Deployment after scaling has %d replicas, want 3", *d.Spec.Replicas)
	}
}

func ptr[T any](v T) *T { return &v }
