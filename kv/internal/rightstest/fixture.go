package rightstest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
)

// Fixture is a server with ACLs bootstrapped, the keys Key and Beside, a lease, and for each
// right a token that lacks it but holds every other right it can.
type Fixture struct {
	Srv     *kv.Server
	Store   *kvtest.LeadingStore
	Addr    string // the HTTP (and stream) listener
	Mgmt    string // the bootstrap token: every right
	Lease   int64
	Lacking map[Right]string
}

// New serves a server over a leading store through Serve (the ACL state follows the
// records as on a node) and sets up the fixture over HTTP.
func New(t *testing.T) *Fixture {
	t.Helper()
	f := NewOpen(t)
	f.Bootstrap(t)
	for right, p := range Policies {
		f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathACLPolicies+"/"+p.Name, string(MustJSON(p)), nil)
		f.Lacking[right] = f.NewToken(t, p.Name).SecretID
	}
	f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathKV+Key, "v0", nil)
	f.MustHTTP(t, f.Mgmt, http.MethodPut, api.PathKV+Beside, "v0", nil)
	var lease api.LeaseGrantResponse
	f.MustHTTP(t, f.Mgmt, http.MethodPost, api.PathLeases, `{"ttl":600}`, &lease)
	f.Lease = lease.ID
	f.WaitLessor(t, f.Lease)
	return f
}

// NewOpen is a fixture without ACLs (no bootstrap yet, no token, keys or lease): for
// what happens before Bootstrap.
func NewOpen(t *testing.T) *Fixture {
	t.Helper()
	st := kvtest.NewLeading()
	f := &Fixture{Store: st, Lacking: map[Right]string{}}
	f.Srv, f.Addr = serve(t, st)
	return f
}

// Bootstrap bootstraps the ACL system; Mgmt is the management token from then on.
func (f *Fixture) Bootstrap(t *testing.T) {
	t.Helper()
	var boot api.ACLToken
	f.MustHTTP(t, "", http.MethodPost, api.PathACLBootstrap, "", &boot)
	f.Mgmt = boot.SecretID
}

// WaitLessor waits until lease id's keepalive is served (as Mgmt): the lessor leads
// from its first poll on, and until then a keepalive is 503.
func (f *Fixture) WaitLessor(t *testing.T, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, b := f.HTTPDo(t, f.Mgmt, http.MethodPost, fmt.Sprintf("%s/%d/keepalive", api.PathLeases, id), "")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease keepalive still %d %s after 10s", code, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve serves a server with the default configuration over store on a free port
// until the test ends.
func serve(t *testing.T, store kv.Store) (*kv.Server, string) {
	t.Helper()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	ln := Listen(t)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return core, ln.Addr().String()
}

// Listen is a listener on a free loopback port (internal/freeport).
func Listen(t *testing.T) net.Listener {
	t.Helper()
	port, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// NewToken creates a token with policies.
func (f *Fixture) NewToken(t *testing.T, policies ...string) api.ACLToken {
	t.Helper()
	var tok api.ACLToken
	f.MustHTTP(t, f.Mgmt, http.MethodPost, api.PathACLTokens, string(MustJSON(api.ACLTokenRequest{Policies: policies})), &tok)
	return tok
}

// HTTPDo sends one request with the bearer secret ("" = none) and returns the status
// and body; a watch answers with its status alone (its body does not end).
func (f *Fixture) HTTPDo(t *testing.T, secret, method, path, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+f.Addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		return resp.StatusCode, nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// MustHTTP sends a request that must answer 200 and decodes its body into out.
func (f *Fixture) MustHTTP(t *testing.T, secret, method, path, body string, out any) {
	t.Helper()
	code, b := f.HTTPDo(t, secret, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, path, code, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// DeleteToken deletes tok and waits until the server has stopped accepting it.
func (f *Fixture) DeleteToken(t *testing.T, tok api.ACLToken) {
	t.Helper()
	f.MustHTTP(t, f.Mgmt, http.MethodDelete, api.PathACLTokens+"/"+tok.AccessorID, "", nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _ := f.HTTPDo(t, tok.SecretID, http.MethodGet, api.PathACLTokenSelf, "")
		if code == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleted token still answered %d after 10s", code)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MustJSON marshals v, which cannot fail for the table's types.
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// ListAnswer is the answer of an HTTP list that was not refused: the keys of its page
// (body: an api.ListResponse).
func ListAnswer(body []byte) Answer {
	var list api.ListResponse
	json.Unmarshal(body, &list)
	a := Answer{Keys: []string{}}
	for _, kv := range list.Items {
		a.Keys = append(a.Keys, kv.Key)
	}
	return a
}
