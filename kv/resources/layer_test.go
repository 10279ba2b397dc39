package resources_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/internal/rightstest"
	"github.com/keel-kv/keel/kv/resources"
	"github.com/keel-kv/keel/versions"
)

// The layer's tests call its Go methods directly, as a door would, over a real server
// (kv.Server over kvtest's fsm store, served on 127.0.0.1 for the ACL records) with
// the schema of kv/httpapi/testdata/widgets-v1v2.yaml: widgets in apps/v1 and apps/v2.

// leading is the store as the versions manager sees it: always the leader.
type leading struct{ *kvtest.LeadingStore }

func (leading) IsLeader() bool { return true }

// fixture is a served core with the typed layer attached and ACLs bootstrapped.
type fixture struct {
	srv   *kv.Server
	layer *resources.Layer
	addr  string
	mgmt  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st := kvtest.NewLeading()
	srv, err := kv.NewServer(kv.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := versions.LoadSchema("../httpapi/testdata/widgets-v1v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := versions.DefaultConfig()
	cfg.NodeID, cfg.Schema, cfg.Store = "n1", schema, leading{st}
	m, err := versions.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, layer: resources.Attach(srv, m)}
	m.Reconcile(context.Background())
	ln := rightstest.Listen(t)
	f.addr = ln.Addr().String()
	door := httpapi.New(srv)
	go door.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		door.Shutdown(ctx)
	})
	var boot api.ACLToken
	f.do(t, "", http.MethodPost, api.PathACLBootstrap, nil, &boot)
	f.mgmt = boot.SecretID
	return f
}

// do sends one HTTP request with the bearer secret and decodes a 2xx answer into out.
func (f *fixture) do(t *testing.T, secret, method, path string, body any, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+f.addr+path, rd)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// secret makes a token holding policy p and returns its secret.
func (f *fixture) secret(t *testing.T, p api.ACLPolicy) string {
	t.Helper()
	f.do(t, f.mgmt, http.MethodPut, api.PathACLPolicies+"/"+p.Name, p, nil)
	var tok api.ACLToken
	f.do(t, f.mgmt, http.MethodPost, api.PathACLTokens, api.ACLTokenRequest{Policies: []string{p.Name}}, &tok)
	return tok.SecretID
}

// caller makes a token holding policy p and resolves it as the core does.
func (f *fixture) caller(t *testing.T, p api.ACLPolicy) kv.Caller {
	t.Helper()
	c, err := f.srv.Authenticate(context.Background(), f.secret(t, p))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLayerRights: the layer's own methods, called without any HTTP route, hold the
// caller to its resource rights — a reader may get and list but not put or delete, a
// token without a right on the resource may do nothing, and a refused call changes
// nothing. The rule is the core's (kv.Server.ResourceRight), so every door gets it.
func TestLayerRights(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	admin, err := f.srv.Authenticate(ctx, f.mgmt)
	if err != nil {
		t.Fatal(err)
	}
	reader := f.caller(t, api.ACLPolicy{Name: "widget-reader",
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "widgets", Access: api.AccessRead}}})
	stranger := f.caller(t, api.ACLPolicy{Name: "gadget-writer",
		Resources: []api.ACLResourceRule{{Group: "apps", Resource: "gadgets", Access: api.AccessWrite}}})
	ref := kv.ObjectRef{Group: "apps", Version: "v1", Resource: "widgets", Name: "w1"}
	list := kv.ObjectRef{Group: "apps", Version: "v1", Resource: "widgets"}
	body := []byte(`{"spec":{"size":2}}`)
	prefix := f.srv.Resources().Schema().Lookup("apps", "widgets").Prefix

	if _, created, err := f.layer.Put(ctx, admin, ref, body, false); err != nil || !created {
		t.Fatalf("admin put: created %v, %v", created, err)
	}
	rev, _, _ := f.srv.Revisions(ctx)
	for i, tc := range []struct {
		name string
		c    kv.Caller
		call func(kv.Caller) error
		ok   bool
	}{
		{"reader get", reader, func(c kv.Caller) error { _, err := f.layer.Get(ctx, c, ref, fsm.Linearizable); return err }, true},
		{"reader list", reader, func(c kv.Caller) error {
			_, err := f.layer.List(ctx, c, list, kv.ObjectListOptions{Limit: 10})
			return err
		}, true},
		{"reader put", reader, func(c kv.Caller) error { _, _, err := f.layer.Put(ctx, c, ref, body, true); return err }, false},
		{"reader delete", reader, func(c kv.Caller) error { _, err := f.layer.Delete(ctx, c, ref, 0); return err }, false},
		{"stranger get", stranger, func(c kv.Caller) error { _, err := f.layer.Get(ctx, c, ref, fsm.Serializable); return err }, false},
		{"stranger list", stranger, func(c kv.Caller) error {
			_, err := f.layer.List(ctx, c, list, kv.ObjectListOptions{})
			return err
		}, false},
		{"reader watch", reader, func(c kv.Caller) error {
			w, err := f.layer.Watch(ctx, c, list, kv.ObjectWatchOptions{})
			if err == nil {
				w.Close()
			}
			return err
		}, true},
		{"stranger watch", stranger, func(c kv.Caller) error {
			w, err := f.layer.Watch(ctx, c, list, kv.ObjectWatchOptions{ResourceVersion: 1})
			if err == nil {
				w.Close()
			}
			return err
		}, false},
		{"stranger core watch", stranger, func(c kv.Caller) error { // the core's own check, without the layer's view
			w, done, err := f.srv.ResourceWatch(ctx, c, "apps", "widgets", fsm.WatchOptions{Key: []byte(prefix), End: fsm.PrefixEnd([]byte(prefix))})
			if err == nil {
				w.Close()
				done()
			}
			return err
		}, false},
		{"admin core watch beyond the resource", admin, func(c kv.Caller) error {
			w, done, err := f.srv.ResourceWatch(ctx, c, "apps", "widgets", fsm.WatchOptions{Key: []byte("/"), End: fsm.PrefixEnd([]byte("/"))})
			if err == nil {
				w.Close()
				done()
			}
			return err
		}, false},
		{"admin core write beyond the resource", admin, func(c kv.Caller) error {
			_, err := f.srv.ResourceTxn(ctx, c, "apps", "widgets", &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("/elsewhere"), Value: []byte("x")}}})
			return err
		}, false},
		{"stranger put", stranger, func(c kv.Caller) error { _, _, err := f.layer.Put(ctx, c, ref, body, false); return err }, false},
	} {
		err := tc.call(tc.c)
		if tc.ok && err != nil {
			t.Errorf("#%d %s: %v, want allowed", i, tc.name, err)
		}
		if !tc.ok && !errors.Is(err, kv.ErrForbidden) && !errors.Is(err, kv.ErrReservedPrefix) {
			t.Errorf("#%d %s: %v, want ErrForbidden", i, tc.name, err)
		}
	}
	if now, _, _ := f.srv.Revisions(ctx); now != rev {
		t.Errorf("revision %d after the refused calls, want %d (nothing written)", now, rev)
	}
	obj, err := f.layer.Get(ctx, admin, kv.ObjectRef{Group: "apps", Version: "v2", Resource: "widgets", Name: "w1"}, fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	if spec, _ := obj["spec"].(map[string]any); fmt.Sprint(spec["replicas"]) != "2" {
		t.Errorf("v2 view of the object = %v, want spec.replicas 2", obj)
	}
}

// TestLayerWatch: a typed watch through the layer's methods alone — the objects that
// exist as ADDED (Initial), then ADDED, MODIFIED and DELETED in the watch's version
// (v2: size read as spec.replicas), and a BOOKMARK at a revision; Close gives the
// watch slot back.
func TestLayerWatch(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	admin, err := f.srv.Authenticate(ctx, f.mgmt)
	if err != nil {
		t.Fatal(err)
	}
	v1 := func(name string) kv.ObjectRef {
		return kv.ObjectRef{Group: "apps", Version: "v1", Resource: "widgets", Name: name}
	}
	if _, _, err := f.layer.Put(ctx, admin, v1("a"), []byte(`{"spec":{"size":1}}`), false); err != nil {
		t.Fatal(err)
	}
	slots := f.srv.Watches()
	w, err := f.layer.Watch(ctx, admin, kv.ObjectRef{Group: "apps", Version: "v2", Resource: "widgets"}, kv.ObjectWatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.srv.Watches() != slots+1 {
		t.Errorf("watches = %d after Watch, want %d", f.srv.Watches(), slots+1)
	}
	type seen struct {
		typ, name, replicas string
	}
	see := func(ev kv.ObjectEvent) seen {
		meta, _ := ev.Object["metadata"].(map[string]any)
		spec, _ := ev.Object["spec"].(map[string]any)
		return seen{ev.Type, fmt.Sprint(meta["name"]), fmt.Sprint(spec["replicas"])}
	}
	var got []seen
	for _, ev := range w.Initial() {
		got = append(got, see(ev))
	}
	steps := []func() error{
		func() error {
			_, _, err := f.layer.Put(ctx, admin, v1("b"), []byte(`{"spec":{"size":2}}`), false)
			return err
		},
		func() error {
			_, _, err := f.layer.Put(ctx, admin, v1("b"), []byte(`{"spec":{"size":3}}`), false)
			return err
		},
		func() error { _, err := f.layer.Delete(ctx, admin, v1("a"), 0); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		groups, err := w.Watcher().Next(nctx)
		cancel()
		if err != nil {
			t.Fatalf("step %d: Next: %v", i, err)
		}
		evs, end := w.Events(groups)
		if end != nil {
			t.Fatalf("step %d: the watch ended: %v", i, end)
		}
		for _, ev := range evs {
			got = append(got, see(ev))
		}
	}
	want := []seen{{"ADDED", "a", "1"}, {"ADDED", "b", "2"}, {"MODIFIED", "b", "3"}, {"DELETED", "a", "1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	bm, err := w.Bookmark(42)
	if meta, _ := bm.Object["metadata"].(map[string]any); err != nil || bm.Type != kv.ObjectBookmark || fmt.Sprint(meta["revision"]) != "42" {
		t.Errorf("Bookmark(42) = %+v, %v", bm, err)
	}
	w.Close()
	if f.srv.Watches() != slots {
		t.Errorf("watches = %d after Close, want %d", f.srv.Watches(), slots)
	}
}
