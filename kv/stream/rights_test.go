package stream_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// streamDoor carries the rights table's cases over the stream protocol: one
// connection per token, opened (upgraded with the token) at its first use.
type streamDoor struct {
	f     *rt.Fixture
	conns map[string]*rightsStream
	id    uint64
}

type rightsStream struct {
	conn net.Conn
	br   *bufio.Reader
}

func newStreamDoor(f *rt.Fixture) *streamDoor {
	return &streamDoor{f: f, conns: map[string]*rightsStream{}}
}

// open upgrades a connection with secret ("" = no token). A refused upgrade is
// answered as the door's answer to every operation on it.
func (d *streamDoor) open(t *testing.T, secret string) (*rightsStream, rt.Answer) {
	t.Helper()
	if c := d.conns[secret]; c != nil {
		return c, rt.Answer{}
	}
	conn, err := net.Dial("tcp", d.f.Addr)
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
		return nil, rt.Answer{Code: resp.StatusCode, Reason: e.Reason, Msg: e.Message}
	}
	c := &rightsStream{conn: conn, br: br}
	d.conns[secret] = c
	return c, rt.Answer{}
}

// request is the stream request that carries op; ok false when the stream protocol
// carries no such op.
func (d *streamDoor) request(t *testing.T, op rt.Op) (r api.StreamRequest, ok bool) {
	t.Helper()
	d.id++
	r = api.StreamRequest{ID: d.id, Key: []byte(op.Key)}
	switch op.Kind {
	case rt.Get:
		r.Op, r.Serializable, r.Revision = api.StreamGet, op.Serializable, op.Revision
	case rt.Range: // the stream ranges in a transaction
		r.Op, r.Key = api.StreamTxn, nil
		r.Value = rt.MustJSON(api.TxnRequest{Success: []api.Op{{Type: api.OpGet, Key: op.Key, Prefix: true, Limit: op.Limit}}})
	case rt.Put:
		r.Op, r.Value = api.StreamPut, op.PutValue()
		if op.Lease {
			r.HasLease, r.LeaseID = true, d.f.LeaseOf(op)
		}
	case rt.Delete:
		r.Op, r.HasPrev, r.PrevRevision = api.StreamDelete, op.HasPrev, op.Prev
	case rt.DeleteRange:
		if op.HasPrev {
			return r, false // a txn's delete_range carries no guard of its own
		}
		r.Op, r.Key = api.StreamTxn, nil
		r.Value = rt.MustJSON(api.TxnRequest{Success: []api.Op{{Type: api.OpDeleteRange, Key: op.Key, Prefix: true}}})
	case rt.Watch:
		r.Op, r.Prefix = api.StreamWatch, op.Prefix
	case rt.Txn:
		r.Op, r.Key, r.Value = api.StreamTxn, nil, rt.MustJSON(op.Txn)
		if op.Body != nil {
			r.Value = op.Body
		}
	case rt.LeaseGrant:
		r.Op, r.TTL = api.StreamLeaseGrant, 600*time.Second
	case rt.LeaseKeepAlive:
		r.Op, r.LeaseID = api.StreamLeaseKeepAlive, d.f.LeaseOf(op)
	case rt.LeaseRevoke:
		r.Op, r.LeaseID = api.StreamLeaseRevoke, d.f.LeaseOf(op)
	case rt.LeaseTimeToLive, rt.LeaseList, rt.Compact, rt.MemberList, rt.MemberRemove, rt.HashKV, rt.Snapshot, rt.Defragment,
		rt.MoveLeader:
		return r, false // HTTP's (and etcd's) alone
	default:
		t.Fatalf("stream door: op %d unknown", op.Kind)
	}
	return r, true
}

func (d *streamDoor) Do(t *testing.T, secret string, op rt.Op) rt.Answer {
	t.Helper()
	c, refused := d.open(t, secret)
	if c == nil {
		return refused
	}
	req, ok := d.request(t, op)
	if !ok {
		return rt.NotServed
	}
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
			return rt.Answer{Code: r.Err.Code, Reason: r.Err.Reason, Msg: r.Err.Message}
		}
		if req.Op == api.StreamWatch {
			cancel := api.StreamRequest{ID: req.ID, Op: api.StreamWatchCancel}
			c.conn.Write(api.AppendStreamRequest(nil, &cancel))
		}
		if op.Kind == rt.Range {
			return rangeAnswer(r.Body)
		}
		return rt.Answer{}
	}
	t.Fatalf("stream: no answer to request %d among 1000 frames", req.ID)
	return rt.Answer{}
}

// rangeAnswer is the keys a ranged get's transaction answered (body: api.TxnResponse).
func rangeAnswer(body []byte) rt.Answer {
	var resp api.TxnResponse
	json.Unmarshal(body, &resp)
	a := rt.Answer{Keys: []string{}}
	for _, r := range resp.Responses {
		for _, kv := range r.KVs {
			a.Keys = append(a.Keys, kv.Key)
		}
	}
	return a
}

// TestStreamRightsTable: every stream op — get, put (with a lease too), delete,
// watch, txn, and the lease ops — sent on a stream whose token lacks the op's right
// is refused 403 Forbidden naming the right, and changes nothing; a stream without a
// token is refused at the upgrade (401); a stream whose token is deleted while it is
// open is refused 401 for every op from then on.
func TestStreamRightsTable(t *testing.T) {
	f := rt.New(t)
	d := newStreamDoor(f)
	rt.RunRightCases(t, f, d)
	rt.RunUnauthorizedCases(t, f, d, "", "no token")

	gone := f.NewToken(t, rt.Policies[rt.NeedRead].Name)
	d.open(t, gone.SecretID) // open before the token is deleted
	f.DeleteToken(t, gone)
	rt.RunUnauthorizedCases(t, f, d, gone.SecretID, "a token deleted while the stream is open")
	rt.RunUnauthorizedCases(t, f, newStreamDoor(f), gone.SecretID, "a deleted token")
}

// TestStreamRulesTable: the rules table (key limits and UTF-8, the value limit, the
// TestStreamLeaseOwner: a lease is its granter's on the stream protocol — another
// tenant's token neither renews nor revokes it, with keys attached or not; a token
// of the owner's policy and a management token renew it.
func TestStreamLeaseOwner(t *testing.T) {
	f := rt.New(t)
	rt.RunLeaseOwnerCases(t, f, newStreamDoor(f))
}

// reserved prefix, duplicate keys) over the stream protocol, with every right.
func TestStreamRulesTable(t *testing.T) {
	f := rt.New(t)
	rt.RunRuleCases(t, f, newStreamDoor(f))
}
