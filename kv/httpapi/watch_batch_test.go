package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// batchEvent is one watch event in a form both doors' events compare in.
type batchEvent struct {
	rev      int64
	typ, key string
}

func (e batchEvent) String() string { return fmt.Sprintf("%d:%s %s", e.rev, e.typ, e.key) }

// applyWatchBatch applies, in one fsm.ApplyBatch (raft handing the store several
// committed entries at once), writes at four revisions under b/ mixed with a write
// outside it, a no-op entry and a failed guard; it returns the events a watch of b/
// must get, in order.
func applyWatchBatch(t *testing.T, ts *testServer) []batchEvent {
	t.Helper()
	put := func(k string) fsm.Op { return fsm.Op{Type: fsm.OpPut, Key: []byte(k), Value: []byte("v")} }
	del := fsm.Op{Type: fsm.OpDelete, Key: []byte("b/1")}
	tx := func(ops ...fsm.Op) *fsm.Command { return &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}} }
	failed := &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{put("b/never")},
		Compares: []fsm.Compare{{Key: []byte("b/1"), Target: fsm.TargetVersion, Result: fsm.CompareEqual, Int: 99}}}}
	r := ts.revision()
	res, err := ts.store.ApplyBatch([]*fsm.Command{
		tx(put("b/1")),             // r+1
		tx(put("c/1")),             // r+2: outside b/
		nil,                        // no-op entry
		tx(put("b/2"), put("b/3")), // r+3: two events
		failed,                     // no revision
		tx(del),                    // r+4
		tx(put("b/4")),             // r+5
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range res {
		if x != nil && x.Err != nil {
			t.Fatalf("batch entry %d: %v", i, x.Err)
		}
	}
	if got := ts.revision(); got != r+5 {
		t.Fatalf("revision after the batch = %d, want %d", got, r+5)
	}
	return []batchEvent{{r + 1, "PUT", "b/1"}, {r + 3, "PUT", "b/2"}, {r + 3, "PUT", "b/3"},
		{r + 4, "DELETE", "b/1"}, {r + 5, "PUT", "b/4"}}
}

func checkBatchEvents(t *testing.T, door string, got, want []batchEvent) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s watch of b/ after one batch got\n %v\nwant every revision's events in order\n %v", door, got, want)
	}
}

// TestWatchHTTPApplyBatch: a live HTTP watch gets the events of every revision of a
// batch of committed entries applied at once, in order — not only the last one's.
func TestWatchHTTPApplyBatch(t *testing.T) {
	ts := newTestServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, next := ts.watch(ctx, api.PathWatch+"b/?prefix=true")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	// One event first: the watch is live (registered), so the batch reaches it live.
	if ts.put("b/0", "v"); next().KV.Key != "b/0" {
		t.Fatal("first event is not b/0")
	}
	want := applyWatchBatch(t, ts)
	var got []batchEvent
	for len(got) < len(want) {
		ev := next()
		if ev.Type != "PUT" && ev.Type != "DELETE" {
			t.Fatalf("event %+v", ev)
		}
		got = append(got, batchEvent{ev.Revision, ev.Type, ev.KV.Key})
		if ev.Revision >= want[len(want)-1].rev && ev.Remaining == 0 {
			break
		}
	}
	checkBatchEvents(t, "HTTP", got, want)
}

// TestStreamWatchApplyBatch: the same over a stream watch.
func TestStreamWatchApplyBatch(t *testing.T) {
	ts := newTestServer(t)
	conn, br := rawStream(t, ts)
	sendReq(t, conn, api.StreamRequest{ID: 1, Op: api.StreamWatch, Key: []byte("b/"), Prefix: true})
	if r := readResponse(t, br); r.Err != nil || r.Watch != api.StreamWatchCreated {
		t.Fatalf("watch: %+v (err %+v)", r, r.Err)
	}
	ts.put("b/0", "v")
	if r := readResponse(t, br); r.Watch != api.StreamWatchEvents || len(r.Events) != 1 || r.Events[0].KV.Key != "b/0" {
		t.Fatalf("first event: %+v", r)
	}
	want := applyWatchBatch(t, ts)
	var got []batchEvent
	for len(got) < len(want) {
		r := readResponse(t, br)
		if r.Watch != api.StreamWatchEvents {
			t.Fatalf("frame %+v", r)
		}
		for _, ev := range r.Events {
			got = append(got, batchEvent{r.Revision, ev.Type, ev.KV.Key})
		}
		if r.Revision >= want[len(want)-1].rev {
			break
		}
	}
	checkBatchEvents(t, "stream", got, want)
}
