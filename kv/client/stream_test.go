package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
	"github.com/keel-kv/keel/raft"
)

// oldStreamNode serves a node of the first stream release: its upgrade offers no
// feature, and it answers every frame with a 400 (unknown op), as it would a watch or
// a lease op; everything else is a real server's HTTP.
func oldStreamNode(t *testing.T) *fixture {
	t.Helper()
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != api.PathStream {
			srv.Handler().ServeHTTP(w, r)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.StreamProtocol + "\r\n\r\n")
		brw.Flush()
		for {
			body, err := api.ReadStreamFrame(brw.Reader, api.MaxStreamFrame)
			if err != nil {
				return
			}
			var req api.StreamRequest
			api.DecodeStreamRequest(body, &req)
			conn.Write(api.AppendStreamResponse(nil, &api.StreamResponse{ID: req.ID, Op: req.Op,
				Err: &api.Error{Code: 400, Reason: api.ReasonBadRequest, Message: "api: malformed stream frame: unknown op"}}))
		}
	})
	hs := httptest.NewServer(old)
	t.Cleanup(hs.Close)
	return &fixture{store: store, url: hs.URL, sent: &countingTransport{}}
}

func (f *fixture) streamClient(t testing.TB, addrs ...string) *client.Client {
	t.Helper()
	c, err := client.New(addrs, client.Options{HTTPClient: &http.Client{Transport: f.sent}, Stream: true,
		MaxRetries: 5, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStreamMatchesHTTP: every single-key operation and transaction answers the same
// over the stream protocol as over HTTP — values, revisions, and errors down to code,
// reason and message — and none of them goes over HTTP.
func TestStreamMatchesHTTP(t *testing.T) {
	type step struct {
		name string
		do   func(c *client.Client) (any, error)
	}
	ctx := context.Background()
	big := strings.Repeat("x", 11)
	steps := []step{
		{"put", func(c *client.Client) (any, error) { return c.Put(ctx, "a/b", []byte("one")) }},
		{"put empty value", func(c *client.Client) (any, error) { return c.Put(ctx, "empty", nil) }},
		{"get", func(c *client.Client) (any, error) { return c.Get(ctx, "a/b") }},
		{"get empty value", func(c *client.Client) (any, error) { return c.Get(ctx, "empty") }},
		{"get absent", func(c *client.Client) (any, error) { return c.Get(ctx, "absent") }},
		{"get serializable", func(c *client.Client) (any, error) { return c.Get(ctx, "a/b", client.WithSerializable()) }},
		{"cas stale", func(c *client.Client) (any, error) { return c.PutCAS(ctx, "a/b", []byte("x"), 2) }},
		{"cas create exists", func(c *client.Client) (any, error) { return c.PutCAS(ctx, "a/b", []byte("x"), 0) }},
		{"cas", func(c *client.Client) (any, error) { return c.PutCAS(ctx, "a/b", []byte("two"), 1) }},
		{"get old revision", func(c *client.Client) (any, error) { return c.Get(ctx, "a/b", client.WithRevision(1)) }},
		{"get future revision", func(c *client.Client) (any, error) { return c.Get(ctx, "a/b", client.WithRevision(99)) }},
		{"empty key", func(c *client.Client) (any, error) { return c.Put(ctx, "", []byte("x")) }},
		{"bad utf-8 key", func(c *client.Client) (any, error) { return c.Get(ctx, "\xff") }},
		{"value too large", func(c *client.Client) (any, error) { return c.Put(ctx, "big", []byte(big)) }},
		{"system key", func(c *client.Client) (any, error) { return c.Put(ctx, "\x00keel/x", []byte("x")) }},
		{"delete cas stale", func(c *client.Client) (any, error) { return c.DeleteCAS(ctx, "a/b", 1) }},
		{"delete cas", func(c *client.Client) (any, error) { return c.DeleteCAS(ctx, "a/b", 3) }},
		{"delete absent", func(c *client.Client) (any, error) { return c.Delete(ctx, "a/b") }},
		{"delete", func(c *client.Client) (any, error) { return c.Delete(ctx, "empty") }},
		{"txn put and get", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{
				{Type: api.OpPut, Key: "t/a", Value: []byte("1")}, {Type: api.OpGet, Key: "t/a"}}})
		}},
		{"txn guard fails", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{
				Compare: []api.Compare{{Key: "t/a", Target: api.TargetModRevision, Result: api.ResultEqual, Int: 99}},
				Success: []api.Op{{Type: api.OpDelete, Key: "t/a"}}, Failure: []api.Op{{Type: api.OpGet, Key: "t/", Prefix: true}}})
		}},
		{"txn read only", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: "t/", Prefix: true, Limit: 2}}})
		}},
		{"txn unknown op", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: "swap", Key: "t/a"}}})
		}},
		{"txn missing lease", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpPut, Key: "t/b", Lease: 77}}})
		}},
		{"txn value too large", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpPut, Key: "t/b", Value: []byte(big)}}})
		}},
		{"txn system key", func(c *client.Client) (any, error) {
			return c.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpPut, Key: "\x00keel/x"}}})
		}},
	}
	answers := func(stream bool) ([]string, int64) {
		f := newFixture(t, func(c *kv.Config) { c.MaxValueBytes = 10 })
		c := f.c
		if stream {
			c = f.streamClient(t, f.url)
		}
		var out []string
		for _, s := range steps {
			v, err := s.do(c)
			b, _ := json.Marshal(v)
			out = append(out, fmt.Sprintf("%s: %s %v", s.name, b, err))
		}
		return out, f.sent.n.Load()
	}
	viaHTTP, _ := answers(false)
	viaStream, sent := answers(true)
	for i := range steps {
		if viaHTTP[i] != viaStream[i] {
			t.Errorf("stream and HTTP differ:\n http:   %s\n stream: %s", viaHTTP[i], viaStream[i])
		}
	}
	if sent != 0 {
		t.Errorf("%d requests went over HTTP, want none", sent)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("answers:\n%s", strings.Join(viaStream, "\n"))
	}
}

// TestStreamConcurrent: many goroutines share one stream connection; every write gets
// its own revision and every read its own answer.
func TestStreamConcurrent(t *testing.T) {
	f := newFixture(t)
	c := f.streamClient(t, f.url)
	ctx := context.Background()
	const workers, each = 32, 50
	var mu sync.Mutex
	revs := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := fmt.Sprintf("w%d/%d", w, i)
				rev, err := c.Put(ctx, key, []byte(key))
				if err != nil {
					errs <- err
					return
				}
				got, err := c.Get(ctx, key)
				if err != nil || string(got.Value) != key || got.ModRevision != rev {
					errs <- fmt.Errorf("get %s = %+v, %v; want value %s at %d", key, got, err, key, rev)
					return
				}
				mu.Lock()
				revs[rev] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(revs) != workers*each {
		t.Fatalf("%d distinct revisions for %d writes", len(revs), workers*each)
	}
}

// TestStreamRetries: the stream keeps the retry rules of HTTP. No leader (not applied)
// is retried, writes included, and applies once; a timeout (outcome unknown) is not
// retried for a write but is for a read.
func TestStreamRetries(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	c := f.streamClient(t, f.url)
	before := f.store.FSM().Revision()
	f.store.FailNext(3, raft.ErrNoLeader)
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("Put through 3 no-leader answers: %v", err)
	}
	if got := f.store.FSM().Revision(); got != before+1 {
		t.Fatalf("revision %d → %d, want exactly one write", before, got)
	}
	f.store.FailNext(1, raft.ErrTimeout)
	_, err := c.Put(ctx, "k", []byte("w"))
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 504 || !strings.Contains(e.Message, "outcome of the write is unknown") {
		t.Fatalf("Put on timeout = %v; want a 504 saying the outcome is unknown, not retried", err)
	}
	f.store.FailNext(2, raft.ErrTimeout)
	if got, err := c.Get(ctx, "k"); err != nil || string(got.Value) != "v" {
		t.Fatalf("Get through timeouts = %+v, %v", got, err)
	}
	if f.sent.n.Load() != 0 {
		t.Fatalf("%d requests went over HTTP", f.sent.n.Load())
	}
}

// TestStreamFallsBackToHTTP: a node of an older release answers /v1/stream with 404;
// the client uses HTTP for it, and the answers are the same.
func TestStreamFallsBackToHTTP(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	old := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.PathStream {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"code":404,"reason":"NotFound","message":"kv: no such route"}`))
			return
		}
		srv.Handler().ServeHTTP(w, r)
	})
	hs := httptest.NewServer(old)
	defer hs.Close()
	f := &fixture{store: store, url: hs.URL, sent: &countingTransport{}}
	c := f.streamClient(t, hs.URL)
	ctx := context.Background()
	rev, err := c.Put(ctx, "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k"); err != nil || string(got.Value) != "v" || got.ModRevision != rev {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if d, err := c.Delete(ctx, "k"); err != nil || d.Deleted != 1 {
		t.Fatalf("Delete = %+v, %v", d, err)
	}
	if n := f.sent.n.Load(); n != 3 {
		t.Fatalf("%d requests over HTTP, want all 3", n)
	}
}

// TestStreamShutdown: Shutdown waits for a request in flight on a stream, answers
// it, then closes the stream; the next request finds the node gone.
func TestStreamShutdown(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	f := &fixture{store: store, sent: &countingTransport{}}
	c := f.streamClient(t, ln.Addr().String())
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// A read that waits on its read index: it is in flight when Shutdown starts, and
	// is answered once the read index completes.
	release := store.HoldLinearizable()
	got := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "k")
		got <- err
	}()
	for store.Held() == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		done <- srv.Shutdown(sctx)
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Get in flight during shutdown = %v, want its answer", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Get in flight during shutdown never returned")
	}
	if _, err := c.Get(ctx, "k"); !client.IsRetriable(err) {
		t.Fatalf("Get after shutdown = %v, want a retriable error", err)
	}
}

// TestStreamTxnOldStreamNode: a node whose stream protocol predates transactions does
// not offer them at the upgrade; the client sends its transactions over HTTP.
func TestStreamTxnOldStreamNode(t *testing.T) {
	f := oldStreamNode(t)
	c := f.streamClient(t, f.url)
	resp, err := c.Txn(context.Background(), &api.TxnRequest{Success: []api.Op{{Type: api.OpPut, Key: "o/t", Value: []byte("v")}}})
	if err != nil || !resp.Succeeded || resp.Revision != 1 {
		t.Fatalf("txn through a node without stream transactions: %+v, %v", resp, err)
	}
	if n := f.sent.n.Load(); n != 1 {
		t.Fatalf("%d requests over HTTP, want 1 (the txn)", n)
	}
}
