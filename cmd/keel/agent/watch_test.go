package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// The node a Go client watches is stopped mid-stream: the client resumes on another
// node from the first revision it had not delivered, and the events it delivers are
// exactly the writes, in order, with no gap and no duplicate.
// With Options.Stream the watch rides the stream protocol and no request of the
// watching client goes over HTTP.
func TestClusterWatchResumesOnAnotherNode(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) { testClusterWatchResumes(t, stream) })
	}
}

// countingRT counts the HTTP requests it carries.
type countingRT struct{ n atomic.Int64 }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func testClusterWatchResumes(t *testing.T, stream bool) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lead := c.leader()
	watched := (lead + 1) % 3 // a follower: writes go on while it is down
	other := 3 - lead - watched
	addrs := []string{c.agents[watched].HTTPAddr(), c.agents[lead].HTTPAddr(), c.agents[other].HTTPAddr()}
	rt := &countingRT{}
	wc, err := client.New(addrs, client.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Stream: stream, HTTPClient: &http.Client{Transport: rt}})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := client.New([]string{c.agents[lead].HTTPAddr(), c.agents[other].HTTPAddr()}, client.Options{MaxRetries: 20})
	if err != nil {
		t.Fatal(err)
	}
	first, err := writer.Put(ctx, "w/start", []byte("-1"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events := wc.Watch(wctx, "w/", client.WatchOptions{StartRevision: first, PrevKV: true, Progress: 200 * time.Millisecond})

	const n = 400
	revs := map[int64]string{first: "-1"}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			rev, err := writer.Put(ctx, fmt.Sprintf("w/%02d", i%20), []byte(strconv.Itoa(i)))
			if err != nil {
				done <- err
				return
			}
			revs[rev] = strconv.Itoa(i)
			if i == n/3 {
				c.stop(watched) // mid-stream
			}
			if i%50 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		done <- nil
	}()
	var got []client.WatchEvent
	var writeErr error
	writerDone := false
	for len(got) < n+1 {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("watch closed after %d events", len(got))
			}
			if ev.Err != nil {
				t.Fatalf("watch ended after %d events: %v", len(got), ev.Err)
			}
			if ev.Type == api.EventProgress {
				continue
			}
			got = append(got, ev)
		case writeErr = <-done:
			writerDone = true
			if writeErr != nil {
				t.Fatalf("writer: %v", writeErr)
			}
			done = nil
		}
	}
	if !writerDone {
		if err := <-done; err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	for i, ev := range got {
		if i > 0 && ev.Revision != got[i-1].Revision+1 {
			t.Fatalf("#%d: revision %d after %d: a gap or a duplicate", i, ev.Revision, got[i-1].Revision)
		}
		if want, ok := revs[ev.Revision]; !ok || string(ev.KV.Value) != want || ev.Type != api.EventPut {
			t.Fatalf("#%d: %s %s=%q at %d, want value %q", i, ev.Type, ev.KV.Key, ev.KV.Value, ev.Revision, want)
		}
	}
	if got[0].Revision != first {
		t.Fatalf("first event at %d, want %d", got[0].Revision, first)
	}
	if n := rt.n.Load(); stream && n != 0 {
		t.Fatalf("%d requests of the stream client went over HTTP", n)
	}
}

// TestClusterWatchRequireLeader: a watch with RequireLeader on a follower whose two
// peers stop ends (reason NoLeader) within about a heartbeat timeout, over the stream
// protocol and over HTTP, and the client goes on trying to resume it (on a node with a
// leader it would succeed); a watch without the flag on that node stays quiet, as
// etcd's does without WithRequireLeader.
func TestClusterWatchRequireLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	c.waitConverged()
	lead := c.leader()
	f := (lead + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resumed := map[string]chan error{}
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "http"}[stream]
		cl, err := client.New([]string{c.agents[f].HTTPAddr()}, client.Options{Stream: stream, MaxRetries: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ch := make(chan error, 16)
		resumed[name] = ch
		// The watch starts at the put's revision: Watch is asynchronous, and a watch
		// "from now" can be set up after a put that follows it (on a loaded machine it
		// was), which then never comes.
		rev, err := cl.Put(ctx, "rl/"+name, []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		events := cl.Watch(ctx, "rl/", client.WatchOptions{RequireLeader: true, Progress: time.Second, StartRevision: rev,
			OnResume: func(err error) {
				select {
				case ch <- err:
				default:
				}
			}})
		seen := false
		for ev := range events {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if ev.Type == api.EventPut && ev.KV.Key == "rl/"+name {
				seen = true
				break
			}
		}
		if !seen {
			t.Fatalf("%s: the watch ended before the put at %d reached it", name, rev)
		}
	}
	for i := range c.agents {
		if i != f {
			c.stop(i)
		}
	}
	stopped := time.Now()
	for name, ch := range resumed {
		select {
		case err := <-ch:
			if !errors.Is(err, client.ErrWatchEnded) || !strings.Contains(err.Error(), api.ReasonNoLeader) {
				t.Fatalf("%s: the watch resumed after %v: %v, want the node's NoLeader end", name, time.Since(stopped), err)
			}
			if waited := time.Since(stopped); waited > 5*time.Second {
				t.Fatalf("%s: the watch ended %v after the node lost its peers", name, waited)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch of a node cut off from its leader did not end in 10 s", name)
		}
	}
}
