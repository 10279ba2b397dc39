package stream_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// frame wraps body in a length prefix.
func frame(body []byte) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(body))), body...)
}

// TestStreamBadFrames: a malformed request is a 400 for its id and an oversized one a
// 413, each in the core's error table's terms (kv.WireError), and neither changes anything or ends the connection; a frame without a
// readable id does end it.
func TestStreamBadFrames(t *testing.T) {
	ts := newTestServer(t, func(c *kv.Config) { c.MaxValueBytes, c.MaxTxnBodyBytes = 100, 100 })
	conn, br := rawStream(t, ts)
	before := ts.store.FSM().Revision()

	bad := [][]byte{
		{7, byte(api.StreamPut), 0},                                      // truncated key
		{8, 9, 0, 1, 'k'},                                                // unknown op
		{9, byte(api.StreamGet), 0x80, 1, 'k', 0},                        // unknown flag
		{10, byte(api.StreamPut), api.StreamFlagSerializable, 1, 'k', 0}, // serializable put
		{11, byte(api.StreamPut), 0, 1, 'k', 1, 'v', 'x'},                // trailing byte
	}
	for _, b := range bad {
		conn.Write(frame(b))
		r := readResponse(t, br)
		if r.ID != uint64(b[0]) || r.Err == nil || r.Err.Code != http.StatusBadRequest ||
			r.Err.Reason != api.ReasonBadRequest || !strings.HasPrefix(r.Err.Message, kv.ErrInvalidBody.Error()) {
			t.Fatalf("frame %v answered %+v (err %+v), want the core's 400 (kv.ErrInvalidBody) for id %d", b, r, r.Err, b[0])
		}
	}
	// A value over the limit in a frame the door reads (the core's Put refuses it), and
	// a frame over the largest request (Config.MaxRequestBytes: the door skips it).
	for id, size := range map[uint64]int{12: 1000, 14: 10000} {
		big := api.AppendStreamRequest(nil, &api.StreamRequest{ID: id, Op: api.StreamPut, Key: []byte("k"),
			Value: make([]byte, size)})
		conn.Write(big)
		if r := readResponse(t, br); r.ID != id || r.Err == nil || r.Err.Code != http.StatusRequestEntityTooLarge ||
			r.Err.Reason != api.ReasonTooLarge || !strings.HasPrefix(r.Err.Message, kv.ErrTooLarge.Error()) {
			t.Fatalf("oversized frame of %d bytes answered %+v (err %+v), want the core's 413 (kv.ErrTooLarge) for id %d",
				size, r, r.Err, id)
		}
	}
	if got := ts.store.FSM().Revision(); got != before {
		t.Fatalf("revision moved %d → %d on bad frames", before, got)
	}
	// The connection still works.
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 13, Op: api.StreamPut, Key: []byte("k"), Value: []byte("v")}))
	if r := readResponse(t, br); r.ID != 13 || r.Err != nil || r.Revision != before+1 {
		t.Fatalf("put after bad frames = %+v (err %+v)", r, r.Err)
	}
	// No id at all: the server hangs up.
	conn.Write(frame([]byte{0xff}))
	if _, err := api.ReadStreamFrame(br, api.MaxStreamFrame); !errors.Is(err, io.EOF) {
		t.Fatalf("after a frame without an id: %v, want the connection closed", err)
	}
}

// TestStreamNeedsUpgrade: a plain GET of /v1/stream is a 400 that says what to send.
func TestStreamNeedsUpgrade(t *testing.T) {
	ts := newTestServer(t)
	code, body, _ := ts.do(http.MethodGet, api.PathStream, nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "Upgrade: keel-stream/1") {
		t.Fatalf("GET %s = %d %s", api.PathStream, code, body)
	}
}

// TestStreamAnswersOutOfOrder: a slow request does not hold up a fast one behind it
// on the same connection.
func TestStreamAnswersOutOfOrder(t *testing.T) {
	ts := newTestServer(t)
	ts.put("k", "v")
	conn, br := rawStream(t, ts)
	release := ts.store.HoldLinearizable()
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 1, Op: api.StreamGet, Key: []byte("k")}))
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 2, Op: api.StreamGet, Key: []byte("k"), Serializable: true}))
	first := readResponse(t, br)
	release()
	second := readResponse(t, br)
	if first.ID != 2 || first.Err != nil || string(first.KV.Value) != "v" || second.ID != 1 {
		t.Fatalf("answers %+v then %+v; want the serializable read (2) first", first, second)
	}
}

// TestStreamMetrics: the door's metrics, which httpapi.Server.EnableMetrics registers once
// the door is attached, count each stream request by op and status (kills: the
// collectors not handed to EnableMetrics, or requests not observed once registered).
func TestStreamMetrics(t *testing.T) {
	ts := newTestServer(t)
	reg := prometheus.NewRegistry()
	if err := ts.door.EnableMetrics(reg); err != nil {
		t.Fatal(err)
	}
	conn, br := rawStream(t, ts)
	sendReq(t, conn, api.StreamRequest{ID: 1, Op: api.StreamPut, Key: []byte("k"), Value: []byte("v")})
	if r := readResponse(t, br); r.Err != nil {
		t.Fatalf("put: %+v", r.Err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range mfs {
		if mf.GetName() != "keel_stream_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == "put" && labels["code"] == "200" {
				got = m.GetCounter().GetValue()
			}
		}
	}
	if got != 1 {
		t.Fatalf("keel_stream_requests_total{op=put,code=200} = %v, want 1", got)
	}
}
