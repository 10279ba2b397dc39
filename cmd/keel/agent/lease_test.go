package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func (c *testCluster) allClient(t *testing.T) *client.Client {
	t.Helper()
	return c.allClientWith(t, false)
}

// allClientWith is allClient, sending single-key and lease calls over the stream
// protocol when stream is set.
func (c *testCluster) allClientWith(t *testing.T, stream bool) *client.Client {
	t.Helper()
	var addrs []string
	for _, a := range c.agents {
		if a != nil {
			addrs = append(addrs, a.HTTPAddr())
		}
	}
	cl, err := client.New(addrs, client.Options{MaxRetries: 30, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// transferLeadership hands leadership to another node and waits for a new leader. A
// transfer may fail and leave the old leader in place — hashicorp/raft gives the target
// one election timeout to win, which a loaded machine can exceed ("leadership transfer
// timeout") — so after a failed transfer, while the old node still leads, it is asked
// again, until 10 s have passed.
func (c *testCluster) transferLeadership(ctx context.Context) error {
	old := c.leader()
	deadline := time.Now().Add(10 * time.Second)
	err := c.agents[old].Node().TransferLeadership(ctx, "")
	for time.Now().Before(deadline) {
		if err != nil && c.agents[old].Node().Status().State == "Leader" {
			// The transfer is over (failed); a call to a node no longer leading would go
			// to the new leader and move leadership again.
			err = c.agents[old].Node().TransferLeadership(ctx, "")
		}
		for i, a := range c.agents {
			if i != old && a != nil && a.Node().Status().State == "Leader" {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("no new leader after transfers from node %d: %w", old, err)
	}
	return fmt.Errorf("no new leader after transfer from node %d", old)
}

// A lease kept alive survives five leader transfers spread over more than its TTL, and
// so does its key: with the lease calls over HTTP, and over the stream
// protocol (keepalives of a follower's stream forwarded to the leader).
func TestClusterLeaseKeptAliveSurvivesLeaderChanges(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "stream"}[stream], func(t *testing.T) {
			testLeaseKeptAliveSurvivesLeaderChanges(t, stream)
		})
	}
}

func testLeaseKeptAliveSurvivesLeaderChanges(t *testing.T, stream bool) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.allClientWith(t, stream)
	// 3 s: the five transfers below take more than 5 s, so the lease lives only if the
	// keepalives reach each new leader. The TTL bounds the slack a keepalive has: an
	// answer without a Raft entry promises at least TTL/2 and the client sends the next
	// one after a third of that, so one can find as little as TTL/3 left (1 s here, 667
	// ms at 2 s) to reach a new leader, whose lessor first takes over and then writes a
	// renewal entry — 2 s left a loaded machine (load 27) no slack.
	g, err := cl.Grant(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutLease(ctx, "svc/a", []byte("up"), g.ID); err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	lost := cl.KeepAlive(kctx, g.ID)
	for i := 0; i < 5; i++ {
		time.Sleep(time.Second)
		if err := c.transferLeadership(ctx); err != nil {
			t.Fatalf("transfer %d: %v", i, err)
		}
		select {
		case err := <-lost:
			t.Fatalf("lease lost after transfer %d: %v", i, err)
		default:
		}
	}
	if _, err := cl.Get(ctx, "svc/a"); err != nil {
		t.Fatalf("key of a kept-alive lease: %v", err)
	}
	l, err := cl.Lease(ctx, g.ID)
	if err != nil || len(l.Keys) != 1 || l.Keys[0] != "svc/a" {
		t.Fatalf("lease = %+v, %v", l, err)
	}
	// A transaction's get returns the key's lease on every node, the leader's result
	// forwarded to a follower included.
	for i, a := range c.agents {
		one, err := client.New([]string{a.HTTPAddr()}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := one.Txn(ctx, &api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: "svc/a"}}})
		one.Close()
		if err != nil || len(res.Responses) != 1 || len(res.Responses[0].KVs) != 1 || res.Responses[0].KVs[0].Lease != g.ID {
			t.Fatalf("txn get on node %d: %+v, %v; want svc/a with lease %d", i, res, err, g.ID)
		}
	}
	kcancel()
	if _, err := cl.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Get(ctx, "svc/a"); !client.IsNotFound(err) {
		t.Fatalf("key after revoke: %v", err)
	}
}

// A lease nobody keeps alive expires on time although leadership moves every 600 ms
// (etcd would renew it at every election and never expire it): not before its TTL, and
// no later than TTL + one election timeout (1 s) + slack for a loaded machine. Its key
// is deleted with it.
func TestClusterLeaseExpiresDespiteLeaderChanges(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := c.allClient(t)
	const ttl = 3 * time.Second
	sent := time.Now()
	g, err := cl.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	if _, err := cl.PutLease(ctx, "eph/a", []byte("x"), g.ID); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var transfers atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(600 * time.Millisecond):
			}
			if err := c.transferLeadership(ctx); err == nil {
				transfers.Add(1)
			}
		}
	}()
	var expired time.Time
	for time.Since(granted) < 20*time.Second {
		if _, err := cl.Get(ctx, "eph/a"); client.IsNotFound(err) {
			expired = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if expired.IsZero() {
		t.Fatalf("lease not expired 20 s after its grant (%d leader transfers)", transfers.Load())
	}
	const bound = time.Second // one election timeout (raft.DefaultConfig)
	const slack = 2 * time.Second
	t.Logf("expired %v after the grant's answer, %d leader transfers", expired.Sub(granted), transfers.Load())
	if expired.Before(sent.Add(ttl)) {
		t.Fatalf("expired early: %v after the grant was sent, TTL %v", expired.Sub(sent), ttl)
	}
	if late := expired.Sub(granted.Add(ttl)); late > bound+slack {
		t.Fatalf("expired %v after its deadline (bound %v + slack %v)", late, bound, slack)
	}
	if transfers.Load() < 3 {
		t.Fatalf("only %d leader transfers during the lease's life", transfers.Load())
	}
	if _, err := cl.Lease(ctx, g.ID); !client.IsLeaseNotFound(err) {
		t.Fatalf("lease after expiry: %v", err)
	}
}

// Two clients take one lock in turns: never two holders at once, and each holder's
// fencing revision is above every earlier holder's.
func TestClusterMutexTwoClients(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holder atomic.Int32
	var mu sync.Mutex
	var fences []int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 1; w <= 2; w++ {
		cl, err := client.New([]string{c.agents[w].HTTPAddr(), c.agents[0].HTTPAddr()}, client.Options{MaxRetries: 20})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(w int32, cl *client.Client) {
			defer wg.Done()
			s, err := client.NewSession(ctx, cl, 2*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close(context.Background())
			m := client.NewMutex(s, "locks/job")
			for i := 0; i < 8; i++ {
				if err := m.Lock(ctx); err != nil {
					errs <- fmt.Errorf("client %d lock %d: %w", w, i, err)
					return
				}
				if !holder.CompareAndSwap(0, w) {
					errs <- fmt.Errorf("client %d holds the lock with client %d", w, holder.Load())
					return
				}
				mu.Lock()
				fences = append(fences, m.Revision())
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				holder.Store(0)
				if err := m.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}(int32(w), cl)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(fences) != 16 {
		t.Fatalf("%d acquisitions, want 16", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fencing revisions not increasing: %v", fences)
		}
	}
}

// A cluster where a voter applies only command formats up to 2 (the previous release)
// refuses lease operations with 503 and a message saying why, writing nothing.
func TestLeasesRefusedUntilEveryVoterAppliesFormat3(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, "n1")
	cfg.Raft.Bootstrap = true
	cfg.MaxCommandFormat = 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, cfgs: []Config{cfg}, agents: []*Agent{a}}
	t.Cleanup(func() { c.stop(0) })
	c.waitReady(0)
	cl, err := client.New([]string{a.HTTPAddr()}, client.Options{MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Grant(ctx, 5*time.Second)
	if e, ok := err.(*client.Error); !ok || e.Code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "command format 3") {
		t.Fatalf("grant in a format-2 cluster: %v", err)
	}
	_, err = cl.PutLease(ctx, "k", []byte("v"), 12)
	if e, ok := err.(*client.Error); !ok || e.Code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "command format 3") {
		t.Fatalf("lease put in a format-2 cluster: %v", err)
	}
	if ls, err := cl.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("leases = %v, %v", ls, err)
	}
}

// A node that accepts a keepalive and never answers (a leader cut off from its peers
// holds it until it steps down) costs one attempt, not the lease: the attempt gives up
// after half the time left and the next goes to another node, which stays the node
// tried first.
func TestClusterKeepAliveSurvivesANodeThatNeverAnswers(t *testing.T) {
	c := newTestCluster(t, 1)
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	var held sync.WaitGroup
	defer held.Wait()
	go func() {
		for {
			conn, err := hole.Accept()
			if err != nil {
				return
			}
			held.Add(1)
			go func() { // read the request, answer nothing until the listener closes
				defer held.Done()
				defer conn.Close()
				io.Copy(io.Discard, conn)
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New([]string{"http://" + hole.Addr().String(), c.agents[0].HTTPAddr()},
		client.Options{MaxRetries: 2, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := client.New([]string{c.agents[0].HTTPAddr()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := direct.Grant(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	lost := cl.KeepAlive(kctx, g.ID)
	select {
	case err := <-lost:
		t.Fatalf("lease lost behind a node that never answers: %v", err)
	case <-time.After(6 * time.Second): // 2 TTLs
	}
	kcancel()
	if _, err := cl.Lease(ctx, g.ID); err != nil {
		t.Fatalf("lease after 6 s of keepalives: %v", err)
	}
	hole.Close()
}
