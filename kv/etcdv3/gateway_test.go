package etcdv3_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/etcdv3"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// serveDoor serves core's etcd door on a free port until the test ends; it returns
// the port's address.
func serveDoor(t *testing.T, core *kv.Server) string {
	_, addr := serveDoorServer(t, core)
	return addr
}

func serveDoorServer(t *testing.T, core *kv.Server) (*etcdv3.Server, string) {
	t.Helper()
	e := etcdv3.New(core)
	ln := rt.Listen(t)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e, ln.Addr().String()
}

// post sends one gateway request and returns its status and body.
func post(t *testing.T, c *http.Client, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// sameJSON reports whether a and b are the same JSON value (protojson spaces its
// output at random, as etcd's gateway answers show).
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// checkBothOnOnePort puts a key over HTTP/1.1 (etcd's JSON: bytes in base64, int64s
// as strings), reads it back over gRPC on the same port and over the gateway, and
// asks GET /version and /health.
func checkBothOnOnePort(t *testing.T, hc *http.Client, base string, conn *grpc.ClientConn) {
	t.Helper()
	code, body := post(t, hc, base+"/v3/kv/put", "", `{"key":"`+b64("gw/a")+`","value":"`+b64("v1")+`"}`)
	var put struct {
		Header struct{ Revision string }
	}
	if err := json.Unmarshal([]byte(body), &put); code != http.StatusOK || err != nil || put.Header.Revision == "" {
		t.Fatalf("put over the gateway: %d %s, want a header whose revision is a string", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("gw/a")})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v1" {
		t.Fatalf("range over gRPC on the same port: %v %v", r, err)
	}
	code, body = post(t, hc, base+"/v3/kv/range", "", `{"key":"`+b64("gw/a")+`"}`)
	var rr struct {
		KVs []struct {
			Key, Value  string
			ModRevision string `json:"mod_revision"`
		} `json:"kvs"`
		Count string `json:"count"`
	}
	if err := json.Unmarshal([]byte(body), &rr); code != http.StatusOK || err != nil || rr.Count != "1" || len(rr.KVs) != 1 {
		t.Fatalf("range over the gateway: %d %s (%v)", code, body, err)
	}
	if v, _ := base64.StdEncoding.DecodeString(rr.KVs[0].Value); string(v) != "v1" {
		t.Errorf("range over the gateway: value %q, want base64 of v1", rr.KVs[0].Value)
	}
	for path, want := range map[string]string{
		"/version": `{"etcdserver":"` + etcdv3.Version + `","etcdcluster":"` + etcdv3.Version + `","storage":"` + etcdv3.Version + `"}`,
		"/health":  `{"health":"true","reason":""}`,
	} {
		resp, err := hc.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != want {
			t.Errorf("GET %s: %d %s, want 200 %s", path, resp.StatusCode, b, want)
		}
	}
}

// A plain etcd port serves gRPC and the JSON gateway (HTTP/1.1) on one listener.
func TestGatewayAndGRPCOnOnePortPlain(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveDoor(t, core)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	checkBothOnOnePort(t, &http.Client{Timeout: 10 * time.Second}, "http://"+addr, conn)
}

// A TLS etcd port that requires client certificates serves gRPC and the gateway on
// one listener, to HTTP clients that offer HTTP/1.1 by ALPN (curl, Go's http.Client
// with HTTP/2 on) and that offer no protocol at all; the gateway refuses a client
// without a certificate as the gRPC door does (etcd's invalid auth token).
func TestGatewayAndGRPCOnOnePortTLS(t *testing.T) {
	ca := tlstest.NewCA(t)
	cfg := kv.DefaultConfig()
	cfg.TLS = tlstest.Reloader(t, ca.Node(t, "n1")).HTTPServerConfig(true)
	cfg.RequireClientCert = true
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveDoor(t, core)
	clientTLS := tlstest.Reloader(t, ca.Client(t, "tester")).ClientConfig()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS.Clone())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		name  string
		h2    bool
		proto string
	}{{"ALPN h2 and http/1.1", true, "HTTP/1.1"}, {"no ALPN", false, "HTTP/1.1"}} {
		t.Run(c.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: clientTLS.Clone(), ForceAttemptHTTP2: c.h2}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			checkBothOnOnePort(t, hc, "https://"+addr, conn)
			resp, err := hc.Get("https://" + addr + "/version")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.Proto != c.proto {
				t.Errorf("protocol %s, want %s", resp.Proto, c.proto)
			}
		})
	}
	bare := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlstest.Reloader(t, ca.CAOnly()).ClientConfig(), ForceAttemptHTTP2: true}}
	code, body := post(t, bare, "https://"+addr+"/v3/kv/range", "", `{"key":"`+b64("gw/a")+`"}`)
	if code != http.StatusUnauthorized || !sameJSON(body, `{"error":"etcdserver: invalid auth token","code":16,"message":"etcdserver: invalid auth token"}`) {
		t.Errorf("range over the gateway without a client certificate: %d %s, want 401 invalid auth token", code, body)
	}
	// No header sets the metadata by which the gateway tells the door the client's
	// certificate was verified.
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/v3/kv/range", strings.NewReader(`{"key":"`+b64("gw/a")+`"}`))
	req.Header.Set("Grpc-Metadata-Keel-Gateway-Verified", "true")
	resp, err := bare.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("range with a forged gateway header and no certificate: %d, want 401", resp.StatusCode)
	}
}

// A watch over the gateway streams its answers as etcd's does: one JSON object a
// line, {"result": ...}, the created answer first, then each event as it happens,
// while the request's body has ended; Stop ends it at once.
func TestGatewayWatchStreamsNDJSON(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e, addr := serveDoorServer(t, core)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/watch",
		strings.NewReader(`{"create_request":{"key":"`+b64("w/")+`","range_end":"`+b64("w0")+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	type answer struct {
		Result struct {
			Created bool `json:"created"`
			Events  []struct {
				Type string `json:"type"`
				KV   struct{ Key, Value string }
			} `json:"events"`
		} `json:"result"`
	}
	next := func() answer {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the watch stream: %v (%q)", err, line)
		}
		var a answer
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("a watch line is not one JSON object: %q: %v", line, err)
		}
		return a
	}
	if a := next(); !a.Result.Created {
		t.Fatalf("first answer %+v, want created", a)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, v := range []string{"one", "two"} {
		if code, body := post(t, hc, "http://"+addr+"/v3/kv/put", "", `{"key":"`+b64("w/k")+`","value":"`+b64(v)+`"}`); code != http.StatusOK {
			t.Fatalf("put: %d %s", code, body)
		}
		a := next()
		if len(a.Result.Events) != 1 || a.Result.Events[0].KV.Key != b64("w/k") || a.Result.Events[0].KV.Value != b64(v) {
			t.Fatalf("event of put %s: %+v", v, a)
		}
	}
	stopped := make(chan struct{})
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		e.Stop(sctx)
		close(stopped)
	}()
	start := time.Now()
	io.Copy(io.Discard, resp.Body) // the stream ends
	<-stopped
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop with a gateway watch open took %v", d)
	}
}

// The gateway honours the token etcd clients send in the Authorization header (what
// Patroni sends after POST /v3/auth/authenticate): a token whose policy writes only
// other/ is served there and refused app/x with etcd's error, in etcd's gateway JSON.
func TestGatewayHonoursAuthorizationHeader(t *testing.T) {
	f := rt.New(t)
	addr := serveDoor(t, f.Srv)
	hc := &http.Client{Timeout: 10 * time.Second}
	narrow := f.Lacking[rt.NeedRead]
	code, body := post(t, hc, "http://"+addr+"/v3/kv/put", narrow, `{"key":"`+b64(rt.Other+"gw")+`","value":"`+b64("v")+`"}`)
	if code != http.StatusOK {
		t.Fatalf("put within the token's prefix: %d %s", code, body)
	}
	code, body = post(t, hc, "http://"+addr+"/v3/kv/range", narrow, `{"key":"`+b64(rt.Key)+`"}`)
	if code != http.StatusForbidden || !sameJSON(body, `{"error":"etcdserver: permission denied","code":7,"message":"etcdserver: permission denied"}`) {
		t.Errorf("range outside the token's prefix: %d %s, want 403 etcd's permission denied", code, body)
	}
	code, body = post(t, hc, "http://"+addr+"/v3/kv/range", f.Mgmt, `{"key":"`+b64(rt.Key)+`"}`)
	var rr struct{ Kvs []any }
	if err := json.Unmarshal([]byte(body), &rr); code != http.StatusOK || err != nil || len(rr.Kvs) != 1 {
		t.Errorf("range with the management token: %d %s", code, body)
	}
}

// A connection that opens with anything but HTTP/2's preface is HTTP's: garbage gets
// HTTP/1.1's 400.
func TestGatewayGarbageIsHTTPs(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveDoor(t, core)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "HELLO\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Errorf("garbage: %q %v, want HTTP/1.1 400", line, err)
	}
}

// GET /health is etcd's: 503 with "RAFT NO LEADER" once the node loses its leader,
// while ?serializable=true (a local read, no leader check) still answers healthy.
func TestGatewayHealthWithoutLeader(t *testing.T) {
	st := &kvtest.Leaderless{LocalStore: kvtest.New()}
	core, err := kv.NewServer(kv.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveDoor(t, core)
	st.Cut()
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, c := range []struct {
		query string
		code  int
		body  string
	}{
		{"", http.StatusServiceUnavailable, `{"health":"false","reason":"RAFT NO LEADER"}` + "\n"},
		{"?serializable=true", http.StatusOK, `{"health":"true","reason":""}`},
	} {
		resp, err := hc.Get("http://" + addr + "/health" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || string(b) != c.body {
			t.Errorf("GET /health%s: %d %q, want %d %q", c.query, resp.StatusCode, b, c.code, c.body)
		}
	}
}

// A keepalive over the gateway is a complete answer, as Patroni reads it: one
// {"result": ...} line, then the end of the body (the door ends the stream once the
// request's body has ended, as etcd does).
func TestGatewayKeepAliveEnds(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.NewLeading(), nil)
	if err != nil {
		t.Fatal(err)
	}
	core.Start() // the lessor (the agent's HTTP door starts it)
	t.Cleanup(core.Stop)
	addr := serveDoor(t, core)
	hc := &http.Client{Timeout: 10 * time.Second}
	code, body := post(t, hc, "http://"+addr+"/v3/lease/grant", "", `{"TTL":"60"}`)
	var grant struct{ ID, TTL string }
	if err := json.Unmarshal([]byte(body), &grant); code != http.StatusOK || err != nil || grant.ID == "" {
		t.Fatalf("grant: %d %s", code, body)
	}
	// The lessor leads from its first poll on: until then a keepalive is 503.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body = post(t, hc, "http://"+addr+"/v3/lease/keepalive", "", `{"ID":"`+grant.ID+`"}`)
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	var ka struct {
		Result struct{ ID, TTL string } `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &ka); code != http.StatusOK || err != nil || ka.Result.ID != grant.ID || ka.Result.TTL != "60" {
		t.Fatalf("keepalive: %d %q, want one result line with the lease's TTL", code, body)
	}
}

// The gateway's calls share one in-process gRPC connection; the per-connection call
// bound (MaxStreamInFlight) is a bound on one client's connection, not on every
// gateway client together: more gateway watches than it, from clients whose own
// budgets allow them, are all served.
func TestGatewayNotBoundByOneConnectionsCalls(t *testing.T) {
	cfg := kv.DefaultConfig()
	cfg.MaxStreamInFlight = 4
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serveDoorServer(t, core)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const watches = 8
	created := make(chan error, watches)
	for i := range watches {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v3/watch",
				strings.NewReader(fmt.Sprintf(`{"create_request":{"key":"%s"}}`, b64(fmt.Sprintf("w/%d", i)))))
			if err != nil {
				created <- err
				return
			}
			resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
			if err != nil {
				created <- err
				return
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err == nil && !strings.Contains(line, `"created":true`) {
				err = fmt.Errorf("first line %q", line)
			}
			created <- err
			<-ctx.Done()
		}()
	}
	for i := range watches {
		select {
		case err := <-created:
			if err != nil {
				t.Fatalf("watch %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d gateway watches created, with a per-connection bound of %d: the gateway's shared connection is bounded as one client's", i, watches, cfg.MaxStreamInFlight)
		}
	}
}

// The gateway's errors read as both generations of etcd's gateway write them, for
// the clients written against either: grpc-gateway v1 (etcd 3.4 and 3.5; Patroni,
// etcd3gw) puts the message under "error" — a string in a unary answer, an object
// with grpc_code, http_code and http_status in a stream's — and v2 (etcd 3.6 on)
// writes a status, {"code","message","details"}. Patroni reads a stream error
// without grpc_code as Unknown and demotes its leader instead of retrying.
func TestGatewayErrorsReadAsEtcd34s(t *testing.T) {
	core, err := kv.NewServer(kv.DefaultConfig(), kvtest.NewLeading(), nil)
	if err != nil {
		t.Fatal(err)
	}
	core.Start()
	t.Cleanup(core.Stop)
	addr := serveDoor(t, core)
	hc := &http.Client{Timeout: 10 * time.Second}

	code, body := post(t, hc, "http://"+addr+"/v3/kv/put", "", `{"value":"eA=="}`)
	var unary struct {
		Error   *string `json:"error"`
		Code    *int    `json:"code"`
		Message string  `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &unary); err != nil || code != http.StatusBadRequest ||
		unary.Error == nil || *unary.Error != "etcdserver: key is not provided" || unary.Message != *unary.Error ||
		unary.Code == nil || *unary.Code != 3 {
		t.Errorf("unary error: %d %s, want 400 with error, code 3 and message", code, body)
	}

	// A keepalive on a node that cannot serve it: Unavailable, the error Patroni met
	// (etcdserver: no leader) at keel's failover.
	st := &kvtest.Leaderless{LocalStore: kvtest.New()}
	cut, err := kv.NewServer(kv.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cutAddr := serveDoor(t, cut)
	st.Cut()
	code, body = post(t, hc, "http://"+cutAddr+"/v3/lease/keepalive", "", `{"ID":"1234567"}`)
	var stream struct {
		Error struct {
			GRPCCode   *int   `json:"grpc_code"`
			HTTPCode   int    `json:"http_code"`
			HTTPStatus string `json:"http_status"`
			Code       *int   `json:"code"`
			Message    string `json:"message"`
			Details    []any  `json:"details"`
		} `json:"error"`
	}
	e := &stream.Error
	if err := json.Unmarshal([]byte(body), &stream); err != nil || code != http.StatusServiceUnavailable ||
		e.GRPCCode == nil || *e.GRPCCode != 14 || e.Code == nil || *e.Code != 14 || e.HTTPCode != http.StatusServiceUnavailable ||
		e.HTTPStatus != "Service Unavailable" || !strings.HasPrefix(e.Message, "etcdserver: ") {
		t.Errorf("stream error: %d %s, want 503 with grpc_code, http_code, http_status, code and message", code, body)
	}
}
