package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/kv/stream"
	"github.com/keel-kv/keel/raft"
)

// The client tests talk real HTTP to a real kv.Server over kvtest.LocalStore: a real
// fsm state machine applied directly, without replication.

// countingTransport counts the requests that reach the network.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

type fixture struct {
	store *kvtest.LocalStore
	url   string
	c     *client.Client
	sent  *countingTransport
}

func newFixture(t testing.TB, opts ...func(*kv.Config)) *fixture {
	t.Helper()
	store := kvtest.New()
	cfg := kv.DefaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	core, err := kv.NewServer(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.New(core)
	stream.Attach(srv)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	f := &fixture{store: store, url: hs.URL, sent: &countingTransport{}}
	f.c = f.client(t, hs.Listener.Addr().String())
	return f
}

func (f *fixture) client(t testing.TB, addrs ...string) *client.Client {
	t.Helper()
	c, err := client.New(addrs, client.Options{HTTPClient: &http.Client{Transport: f.sent},
		MaxRetries: 5, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fixture) putMany(t *testing.T, format string, n int) {
	t.Helper()
	for i := 0; i < n; {
		txn := &fsm.Txn{}
		for ; i < n && len(txn.Success) < fsm.MaxTxnOps; i++ {
			txn.Success = append(txn.Success, fsm.Op{Type: fsm.OpPut, Key: []byte(fmt.Sprintf(format, i)), Value: []byte("v")})
		}
		if res, err := f.store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: txn}); err != nil || res.Err != nil {
			t.Fatalf("putMany: %v %v", err, res.Err)
		}
	}
}

func TestKeyValueOps(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := "dir/../we ird/./key?#%"
	r1, err := f.c.Put(ctx, key, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.c.Get(ctx, key)
	if err != nil || got.Key != key || string(got.Value) != "one" || got.ModRevision != r1 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := f.c.PutCAS(ctx, key, []byte("x"), r1-1); !client.IsConflict(err) {
		t.Fatalf("stale PutCAS error = %v, want conflict", err)
	}
	r2, err := f.c.PutCAS(ctx, key, []byte("two"), r1)
	if err != nil || r2 != r1+1 {
		t.Fatalf("PutCAS = %d, %v; want %d", r2, err, r1+1)
	}
	if old, err := f.c.Get(ctx, key, client.WithRevision(r1), client.WithSerializable()); err != nil || string(old.Value) != "one" {
		t.Fatalf("Get at %d = %+v, %v", r1, old, err)
	}
	if _, err := f.c.Get(ctx, "absent"); !client.IsNotFound(err) {
		t.Fatalf("Get absent = %v, want not found", err)
	}
	if _, err := f.c.DeleteCAS(ctx, key, r1); !client.IsConflict(err) {
		t.Fatalf("stale DeleteCAS = %v, want conflict", err)
	}
	if d, err := f.c.DeleteCAS(ctx, key, r2); err != nil || d.Deleted != 1 {
		t.Fatalf("DeleteCAS = %+v, %v", d, err)
	}
	for _, k := range []string{"p/1", "p/2", "q"} {
		if _, err := f.c.Put(ctx, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := f.c.DeletePrefix(ctx, "p/"); err != nil || d.Deleted != 2 {
		t.Fatalf("DeletePrefix = %+v, %v", d, err)
	}
	if d, err := f.c.Delete(ctx, "q"); err != nil || d.Deleted != 1 {
		t.Fatalf("Delete = %+v, %v", d, err)
	}
	if _, err := f.c.Put(ctx, "", []byte("x")); !client.IsBadRequest(err) {
		t.Fatalf("Put empty key = %v, want bad request", err)
	}
}

func TestTxnCompactStatus(t *testing.T) {
	f := newFixture(t, func(c *kv.Config) { c.MaxValueBytes = 10 })
	ctx := context.Background()
	resp, err := f.c.Txn(ctx, &api.TxnRequest{
		Compare: []api.Compare{{Key: "t", Target: api.TargetExists, Result: api.ResultEqual, Int: 0}},
		Success: []api.Op{{Type: api.OpPut, Key: "t", Value: []byte("1")}},
	})
	if err != nil || !resp.Succeeded || len(resp.Responses) != 1 {
		t.Fatalf("Txn = %+v, %v", resp, err)
	}
	if _, err := f.c.Put(ctx, "big", make([]byte, 11)); !client.IsTooLarge(err) {
		t.Fatalf("Put too large = %v", err)
	}
	c, err := f.c.Compact(ctx, resp.Revision)
	if err != nil || c.CompactRevision != resp.Revision {
		t.Fatalf("Compact = %+v, %v", c, err)
	}
	if _, err := f.c.Compact(ctx, resp.Revision); !client.IsCompacted(err) {
		t.Fatalf("Compact again = %v, want compacted", err)
	}
	st, err := f.c.Status(ctx)
	if err != nil || st.NodeID != "local" || st.Revision != resp.Revision || st.CompactRevision != resp.Revision {
		t.Fatalf("Status = %+v, %v", st, err)
	}
}

// TestTxnDuplicateKey: a branch that writes a key twice comes back as a typed,
// non-retried 400 that names the key.
func TestTxnDuplicateKey(t *testing.T) {
	f := newFixture(t)
	before := f.store.FSM().Revision()
	_, err := f.c.Txn(context.Background(), &api.TxnRequest{Success: []api.Op{
		{Type: api.OpDeleteRange, Key: "z/", Prefix: true},
		{Type: api.OpPut, Key: "z/1", Value: []byte("1")},
	}})
	var e *client.Error
	if !client.IsDuplicateKey(err) || !client.IsBadRequest(err) || client.IsRetriable(err) ||
		!errors.As(err, &e) || !strings.Contains(e.Message, `"z/1"`) {
		t.Fatalf("Txn with a duplicate key = %v, want a 400 DuplicateKey naming z/1", err)
	}
	if n := f.sent.n.Load(); n != 1 {
		t.Errorf("%d requests sent, want 1 (not retried)", n)
	}
	if got := f.store.FSM().Revision(); got != before {
		t.Errorf("revision %d → %d: the refused transaction was applied", before, got)
	}
}

func TestPager(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.putMany(t, "pg/%04d", 2500)
	// A run of deleted keys produces empty pages the pager must step over.
	if _, err := f.c.DeletePrefix(ctx, "pg/1"); err != nil {
		t.Fatal(err)
	}
	p := f.c.NewPager("pg/", client.PagerOptions{Limit: 100})
	var keys []string
	var rev int64
	for !p.Done() {
		items, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(items) > 100 {
			t.Fatalf("page of %d items", len(items))
		}
		if rev == 0 {
			rev = p.Revision()
			f.c.Put(ctx, "pg/0000", []byte("changed")) // after the first page: invisible
		} else if p.Revision() != rev {
			t.Fatalf("page at revision %d, scan at %d", p.Revision(), rev)
		}
		for _, kv := range items {
			keys = append(keys, kv.Key)
			if string(kv.Value) != "v" {
				t.Fatalf("%s = %q at the scan's revision, want v", kv.Key, kv.Value)
			}
		}
	}
	if _, err := p.Next(ctx); err != io.EOF {
		t.Fatalf("Next after the end = %v, want io.EOF", err)
	}
	if len(keys) != 1500 || keys[0] != "pg/0000" || keys[1499] != "pg/2499" || p.Inconsistent() {
		t.Fatalf("pager saw %d keys (%v..%v), want 1500", len(keys), keys[0], keys[len(keys)-1])
	}

	n := 0
	for kv, err := range f.c.NewPager("", client.PagerOptions{Limit: 333}).All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && (kv.Key != "pg/0000" || string(kv.Value) != "changed") {
			t.Fatalf("first key %s=%q", kv.Key, kv.Value)
		}
		n++
	}
	if n != 1500 {
		t.Fatalf("All over everything = %d keys, want 1500", n)
	}
}

// TestPagerCompacted: a compaction mid-scan fails the pager with IsCompacted unless
// AllowInconsistent, with which it finishes at the latest revision.
func TestPagerCompacted(t *testing.T) {
	ctx := context.Background()
	for _, allow := range []bool{false, true} {
		f := newFixture(t)
		f.putMany(t, "c/%03d", 500)
		p := f.c.NewPager("c/", client.PagerOptions{Limit: 100, AllowInconsistent: allow})
		seen := map[string]int{}
		for i := 0; !p.Done(); i++ {
			items, err := p.Next(ctx)
			if i == 1 {
				if !allow {
					var e *client.Error
					if !client.IsCompacted(err) || !errors.As(err, &e) || e.Continue == "" {
						t.Fatalf("page after compaction = %v, want 410 with a continue token", err)
					}
					break
				}
				if err != nil || !p.Inconsistent() {
					t.Fatalf("inconsistent continuation: %v, Inconsistent %v", err, p.Inconsistent())
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range items {
				seen[kv.Key]++
			}
			if i == 0 {
				rev, err := f.c.Put(ctx, "c/499-added", []byte("new"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.c.Compact(ctx, rev); err != nil {
					t.Fatal(err)
				}
			}
		}
		if allow && (len(seen) != 501 || seen["c/000"] != 1 || seen["c/499-added"] != 1) {
			t.Fatalf("inconsistent scan saw %d distinct keys, want 501 each once", len(seen))
		}
	}
}

// TestRetries: 503 Unavailable (no leader) is retried, for writes too, and the write
// applies once; a timeout (outcome unknown) is not retried for a write but is for a
// read; the retry budget is bounded.
func TestRetries(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	before := f.store.FSM().Revision()
	f.store.FailNext(3, raft.ErrNoLeader)
	if _, err := f.c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("Put through 3 no-leader answers: %v", err)
	}
	if got := f.store.FSM().Revision(); got != before+1 {
		t.Fatalf("revision %d → %d, want exactly one write", before, got)
	}
	if n := f.sent.n.Load(); n != 4 {
		t.Fatalf("%d requests sent, want 4", n)
	}

	f.sent.n.Store(0)
	f.store.FailNext(1, raft.ErrTimeout)
	_, err := f.c.Put(ctx, "k", []byte("w"))
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 504 || !client.IsRetriable(err) || f.sent.n.Load() != 1 {
		t.Fatalf("Put on timeout = %v after %d requests; want one 504, not retried", err, f.sent.n.Load())
	}
	f.store.FailNext(1, raft.ErrShutdown)
	if _, err := f.c.Put(ctx, "k", []byte("w")); !client.IsRetriable(err) {
		t.Fatalf("Put on shutdown = %v, want a retriable 503 returned", err)
	}
	f.store.FailNext(2, raft.ErrTimeout)
	if got, err := f.c.Get(ctx, "k"); err != nil || string(got.Value) != "v" {
		t.Fatalf("Get through timeouts = %+v, %v", got, err)
	}

	f.sent.n.Store(0)
	f.store.FailNext(100, raft.ErrNoLeader)
	if _, err := f.c.Get(ctx, "k"); !client.IsRetriable(err) || f.sent.n.Load() != 6 {
		t.Fatalf("Get with no leader for good = %v after %d requests, want 6 then give up", err, f.sent.n.Load())
	}
	f.store.FailNext(0, nil)
}

// TestNoLeaderMovesOnAtOnce: a node that answers 503 NoLeader is cut off from the
// leader; the client tries the next node without backing off (a backoff here would
// last at least the 1s Retry-After), writes included (nothing was applied). When every
// node says NoLeader it backs off as usual.
func TestNoLeaderMovesOnAtOnce(t *testing.T) {
	cut, ok := newFixture(t), newFixture(t)
	cut.store.FailNext(1000, raft.ErrNoLeader)
	sent := &countingTransport{}
	c, err := client.New([]string{cut.url, ok.url}, client.Options{HTTPClient: &http.Client{Transport: sent},
		MaxRetries: 3, MinBackoff: 2 * time.Second, MaxBackoff: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatalf("Put with one node cut off: %v", err)
	}
	if d := time.Since(start); d > time.Second || sent.n.Load() != 2 {
		t.Fatalf("Put took %v and %d requests, want 2 requests and no backoff", d, sent.n.Load())
	}

	ok.store.FailNext(1000, raft.ErrNoLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	sent.n.Store(0)
	_, err = c.Put(ctx, "k", []byte("w"))
	var e *client.Error
	if !errors.As(err, &e) || e.Reason != api.ReasonNoLeader || !client.IsRetriable(err) || sent.n.Load() != 2 {
		t.Fatalf("Put with every node cut off = %v after %d requests, want a NoLeader 503 after trying both then backing off", err, sent.n.Load())
	}
	cut.store.FailNext(0, nil)
	ok.store.FailNext(0, nil)
}

// TestNoLeaderBudget: with NoLeaderBudget, a request that met 503 NoLeader goes on
// for that long (other nodes, one retry after the server's 1 s Retry-After here) and
// then fails with the NoLeader answer — not with a dead node's refused connection,
// and not after every one of MaxRetries backoffs.
func TestNoLeaderBudget(t *testing.T) {
	cut := newFixture(t)
	cut.store.FailNext(1<<30, raft.ErrNoLeader)
	defer cut.store.FailNext(0, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c, err := client.New([]string{cut.url, dead}, client.Options{MaxRetries: 20, NoLeaderBudget: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Get(context.Background(), "k")
	var e *client.Error
	if !errors.As(err, &e) || e.Reason != api.ReasonNoLeader {
		t.Errorf("Get with one node cut off and one dead = %v, want the NoLeader answer", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 3*time.Second {
		t.Errorf("Get gave up after %v, want about the 1 s budget", d)
	}
}

// TestRetryConnectionRefused: a dead node is skipped, writes included (connection
// refused: nothing was sent), over HTTP and over the stream protocol.
func TestRetryConnectionRefused(t *testing.T) {
	f := newFixture(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for name, newClient := range map[string]func(testing.TB, ...string) *client.Client{
		"http": f.client, "stream": f.streamClient,
	} {
		c := newClient(t, dead, f.url)
		for i := range 3 {
			if _, err := c.Put(context.Background(), "k", []byte{byte(i)}); err != nil {
				t.Fatalf("%s: Put with a dead first node: %v", name, err)
			}
		}
		c = newClient(t, dead)
		if _, err := c.Put(context.Background(), "k", []byte("v")); !client.IsRetriable(err) {
			t.Fatalf("%s: Put to only a dead node = %v, want a retriable error", name, err)
		}
	}
}

func TestRetryHonoursContext(t *testing.T) {
	f := newFixture(t)
	c, err := client.New([]string{f.url}, client.Options{MaxRetries: 1000, MinBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.store.FailNext(1<<30, raft.ErrNoLeader)
	defer f.store.FailNext(0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Get = %v after %v, want the context's deadline", err, time.Since(start))
	}
}

func TestNonJSONError(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	defer hs.Close()
	c, err := client.New([]string{hs.URL}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "k")
	var e *client.Error
	if !errors.As(err, &e) || e.Code != 502 || e.Message != "bad gateway from a proxy" {
		t.Fatalf("Get = %#v, want a 502 *Error with the proxy's text", err)
	}
}

func TestNewRejectsBadAddresses(t *testing.T) {
	for _, addrs := range [][]string{nil, {"http://"}, {"http://h:1/path"}, {"::"}} {
		if _, err := client.New(addrs, client.Options{}); err == nil {
			t.Errorf("New(%q) accepted", addrs)
		}
	}
}

// TestPagerDefaultLimitOverWholeListBound: List without a Limit asks for the whole
// list and gets IsTooLarge when the range is over the server's bound; a Pager without
// a Limit still pages (DefaultPageLimit) and reads every key. Kills: NewPager leaving
// Limit 0 (the pager's first request would be the refused whole list).
func TestPagerDefaultLimitOverWholeListBound(t *testing.T) {
	f := newFixture(t, func(c *kv.Config) { c.MaxListLimit = 1500 })
	ctx := context.Background()
	f.putMany(t, "w/%04d", 1600)
	if _, err := f.c.List(ctx, "w/", client.ListOptions{}); !client.IsTooLarge(err) {
		t.Fatalf("whole list over the bound = %v, want 413", err)
	}
	whole, err := f.c.List(ctx, "w/00", client.ListOptions{})
	if err != nil || len(whole.Items) != 100 || whole.Continue != "" {
		t.Fatalf("whole list under the bound: %v, err %v", whole, err)
	}
	n := 0
	for _, err := range f.c.NewPager("w/", client.PagerOptions{}).All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1600 {
		t.Fatalf("pager read %d keys, want 1600", n)
	}
}
