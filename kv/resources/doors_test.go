package resources_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// typedOp is one operation of the typed API, as every door spells it.
type typedOp struct {
	name   string
	write  bool
	method string // HTTP
	path   string
	body   string
	call   func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error
}

var (
	w1      = kv.ObjectRef{Group: "apps", Version: "v1", Resource: "widgets", Name: "w1"}
	widgets = kv.ObjectRef{Group: "apps", Version: "v1", Resource: "widgets"}
)

// typedOps are the typed API's operations on apps/widgets.
var typedOps = []typedOp{
	{"get", false, http.MethodGet, "/apis/apps/v1/widgets/w1", "", func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error {
		_, err := l.Get(ctx, c, w1, fsm.Linearizable)
		return err
	}},
	{"list", false, http.MethodGet, "/apis/apps/v1/widgets?limit=5", "", func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error {
		_, err := l.List(ctx, c, widgets, kv.ObjectListOptions{Limit: 5})
		return err
	}},
	{"watch", false, http.MethodGet, "/apis/apps/v1/widgets?watch=true", "", func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error {
		w, err := l.Watch(ctx, c, widgets, kv.ObjectWatchOptions{})
		if err == nil {
			w.Close()
		}
		return err
	}},
	{"put", true, http.MethodPut, "/apis/apps/v1/widgets/w1", `{"spec":{"size":4}}`, func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error {
		_, _, err := l.Put(ctx, c, w1, []byte(`{"spec":{"size":4}}`), false)
		return err
	}},
	{"delete", true, http.MethodDelete, "/apis/apps/v1/widgets/w1", "", func(ctx context.Context, l kv.ObjectAPI, c kv.Caller) error {
		_, err := l.Delete(ctx, c, w1, 0)
		return err
	}},
}

// typedDoor runs one typed operation for the token secret and reports whether it was
// refused for a missing right.
type typedDoor struct {
	name      string
	forbidden func(t *testing.T, f *fixture, secret string, op typedOp) bool
}

var typedDoors = []typedDoor{
	{"layer", func(t *testing.T, f *fixture, secret string, op typedOp) bool {
		ctx := context.Background()
		c, err := f.srv.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		return errors.Is(op.call(ctx, f.layer, c), kv.ErrForbidden)
	}},
	{"http", func(t *testing.T, f *fixture, secret string, op typedOp) bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // a watch that was let through streams until then
		req, _ := http.NewRequestWithContext(ctx, op.method, "http://"+f.addr+op.path, strings.NewReader(op.body))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			return false
		}
		var e api.Error
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &e); err != nil || e.Reason != api.ReasonForbidden {
			t.Errorf("%s %s: 403 %s, want reason %s", op.method, op.path, b, api.ReasonForbidden)
		}
		return true
	}},
}

// TestTypedRightsEveryDoor: one table of the typed API's rights, run against every
// door that serves it — the layer's Go methods (what a new door calls) and the HTTP
// routes. A token with read on apps/widgets may get, list and watch but not put or
// delete; one with write on another resource may do nothing; one with write on
// apps/widgets may do all. A refused operation changes nothing.
func TestTypedRightsEveryDoor(t *testing.T) {
	f := newFixture(t)
	rule := func(resource, access string) []api.ACLResourceRule {
		return []api.ACLResourceRule{{Group: "apps", Resource: resource, Access: access}}
	}
	tokens := []struct {
		name        string
		policy      api.ACLPolicy
		read, write bool
	}{
		{"reader", api.ACLPolicy{Name: "reader", Resources: rule("widgets", api.AccessRead)}, true, false},
		{"stranger", api.ACLPolicy{Name: "stranger", Resources: rule("gadgets", api.AccessWrite)}, false, false},
		{"writer", api.ACLPolicy{Name: "writer", Resources: rule("widgets", api.AccessWrite)}, true, true},
	}
	for _, tok := range tokens {
		secret := f.secret(t, tok.policy)
		for _, d := range typedDoors {
			for _, op := range typedOps {
				want := !tok.read || (op.write && !tok.write)
				before, _, _ := f.srv.Revisions(context.Background())
				got := d.forbidden(t, f, secret, op)
				if got != want {
					t.Errorf("%s via %s: %s refused = %v, want %v", tok.name, d.name, op.name, got, want)
				}
				if after, _, _ := f.srv.Revisions(context.Background()); got && after != before {
					t.Errorf("%s via %s: refused %s moved the revision %d -> %d", tok.name, d.name, op.name, before, after)
				}
			}
		}
	}
}
