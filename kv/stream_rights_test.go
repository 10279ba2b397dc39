package kv

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// streamDoor carries the rights table's cases over the stream protocol: one
// connection per token, opened (upgraded with the token) at its first use.
type streamDoor struct {
	f     *rightsFixture
	conns map[string]*rightsStream
	id    uint64
}

type rightsStream struct {
	conn net.Conn
	br   *bufio.Reader
}

func newStreamDoor(f *rightsFixture) *streamDoor {
	return &streamDoor{f: f, conns: map[string]*rightsStream{}}
}

// open upgrades a connection with secret ("" = no token). A refused upgrade is
// answered as the door's answer to every operation on it.
func (d *streamDoor) open(t *testing.T, secret string) (*rightsStream, doorAnswer) {
	t.Helper()
	if c := d.conns[secret]; c != nil {
		return c, doorAnswer{}
	}
	conn, err := net.Dial("tcp", d.f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	auth := ""
	if secret != "" {
		auth = api.HeaderAuthorization + ": Bearer " + secret + "\r\n"
	}
	io.WriteString(conn, "GET "+api.PathStream+" HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: "+
		api.StreamProtocol+"\r\n"+auth+"\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stream upgrade: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return nil, doorAnswer{code: resp.StatusCode, reason: e.Reason, msg: e.Message}
	}
	c := &rightsStream{conn: conn, br: br}
	d.conns[secret] = c
	return c, doorAnswer{}
}

// request is the stream request that carries op.
func (d *streamDoor) request(t *testing.T, op doorOp) api.StreamRequest {
	t.Helper()
	d.id++
	r := api.StreamRequest{ID: d.id, Key: []byte(op.key)}
	switch op.kind {
	case opGet:
		r.Op, r.Serializable, r.Revision = api.StreamGet, op.serializable, op.revision
	case opRange: // the stream ranges in a transaction
		r.Op, r.Key = api.StreamTxn, nil
		r.Value = mustJSON(api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: op.key, Prefix: true}}})
	case opPut:
		r.Op, r.Value = api.StreamPut, []byte("v")
		if op.lease {
			r.HasLease, r.LeaseID = true, d.f.lease
		}
	case opDelete:
		r.Op = api.StreamDelete
	case opDeleteRange:
		r.Op, r.Key = api.StreamTxn, nil
		r.Value = mustJSON(api.TxnRequest{Success: []api.Op{{Type: api.OpDeleteRange, Key: op.key, Prefix: true}}})
	case opWatch:
		r.Op, r.Prefix = api.StreamWatch, op.prefix
	case opTxn:
		r.Op, r.Key, r.Value = api.StreamTxn, nil, mustJSON(op.txn)
	case opLeaseGrant:
		r.Op, r.TTL = api.StreamLeaseGrant, 600*time.Second
	case opLeaseKeepAlive:
		r.Op, r.LeaseID = api.StreamLeaseKeepAlive, d.f.lease
	case opLeaseRevoke:
		r.Op, r.LeaseID = api.StreamLeaseRevoke, d.f.lease
	default:
		t.Fatalf("stream door: op %d unknown", op.kind)
	}
	return r
}

func (d *streamDoor) do(t *testing.T, secret string, op doorOp) doorAnswer {
	t.Helper()
	c, refused := d.open(t, secret)
	if c == nil {
		return refused
	}
	req := d.request(t, op)
	if _, err := c.conn.Write(api.AppendStreamRequest(nil, &req)); err != nil {
		t.Fatal(err)
	}
	// Skip the frames of earlier watches on this connection (events, ends).
	for range 1000 {
		r := readResponse(t, c.br)
		if r.ID != req.ID {
			continue
		}
		if r.Err != nil {
			return doorAnswer{code: r.Err.Code, reason: r.Err.Reason, msg: r.Err.Message}
		}
		if req.Op == api.StreamWatch {
			cancel := api.StreamRequest{ID: req.ID, Op: api.StreamWatchCancel}
			c.conn.Write(api.AppendStreamRequest(nil, &cancel))
		}
		return doorAnswer{}
	}
	t.Fatalf("stream: no answer to request %d among 1000 frames", req.ID)
	return doorAnswer{}
}

// TestStreamRightsTable: every stream op — get, put (with a lease too), delete,
// watch, txn, and the lease ops — sent on a stream whose token lacks the op's right
// is refused 403 Forbidden naming the right, and changes nothing; a stream without a
// token is refused at the upgrade (401); a stream whose token is deleted while it is
// open is refused 401 for every op from then on.
func TestStreamRightsTable(t *testing.T) {
	f := newRightsFixture(t)
	d := newStreamDoor(f)
	runRightCases(t, f, d)
	runUnauthorizedCases(t, f, d, "", "no token")

	gone := f.newToken(t, rightsPolicies[needRead].Name)
	d.open(t, gone.SecretID) // open before the token is deleted
	f.deleteToken(t, gone)
	runUnauthorizedCases(t, f, d, gone.SecretID, "a token deleted while the stream is open")
	runUnauthorizedCases(t, f, newStreamDoor(f), gone.SecretID, "a deleted token")
}
