package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/versions"
)

// An attacker runs beside the workload of a TLS cluster with ACLs (TestChaosTLS):
//
//   - on the Raft port, with a certificate the cluster's CA signed for a node ID that
//     is not a member ("intruder"), it sends keel's RPCs: forwarded writes (with and
//     without a caller) of a command that adds an ACL token with every right, remove,
//     retire and transfer of members, and add-voter requests for another node and for
//     itself at an address it does not serve;
//   - on the HTTP port, with a read-only token, it floods every node with reads,
//     lists and watches;
//   - on the etcd port, when the nodes serve it (attack_etcd.go): a RequestProgress
//     flood, idle Watch and health streams over the client's bounds, a call with huge
//     metadata, and the read-only token and another tenant's at the workload's leases;
//     and (attack_bytes.go) on the etcd and HTTP ports, requests that announce more
//     bytes than they send, over the client's budget, and on the HTTP port h2c
//     watches over a connection's and a client's streams and a huge header list.
//
// After the run (attacker.check) nothing it tried may have changed anything: every
// RPC was refused, the forged token does not authenticate, the ACL tokens and the
// Raft configuration are those of before, and the workload's clients were served
// during the flood at no less than minServedRate acknowledged operations a second.

// intruderID is the node ID of the attacker's certificate: never a member.
const intruderID = "intruder"

// minServedRate is the least rate of the workload's successful operations (per second
// of the attack) for the run to count its clients as served: a healthy mixed run does
// well over 50 on 2 busy cores, faults included; a flood that starved them would leave
// a handful.
const minServedRate = 10

// keel's RPC on the raft port (raft/rpc.go): wire values shared by every release.
const (
	attackProtoRPC       byte = 2
	attackRPCApply       byte = 1
	attackRPCAddVoter    byte = 3
	attackRPCRemove      byte = 5
	attackRPCTransfer    byte = 6
	attackRPCApplyLeases byte = 10
	attackRPCRetire      byte = 11
	attackRPCApplyAs     byte = 12
)

type attacker struct {
	c       *ProcCluster
	h       *History
	logf    func(string, ...any)
	raftTLS *tls.Config
	forged  string // the secret of the token the forged record would add
	command []byte // the forged write, encoded
	roToken string
	etcd    *etcdAttack // nil: no etcd door
	// watchPrefix is the workload's prefix (the h2c watches', attack_bytes.go).
	watchPrefix string

	tokensBefore, membersBefore []string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	from   int64 // history clock when the attack started
	to     atomic.Int64

	raftTries, floodOK, floodErr atomic.Int64
	mu                           sync.Mutex
	breaches                     []string
}

// startAttack starts the attacker on a process cluster with TLS and ACLs; nil on any
// other.
// leases are the workload's (the etcd attack's targets; nil: none).
func startAttack(ctx context.Context, c Cluster, h *History, leases *Leases, prefix string, logf func(string, ...any)) (*attacker, error) {
	if pc, ok := c.(*ProcCluster); ok {
		return pc.startAttack(ctx, h, leases, prefix, logf)
	}
	return nil, nil
}

func (c *ProcCluster) startAttack(ctx context.Context, h *History, leases *Leases, prefix string, logf func(string, ...any)) (*attacker, error) {
	if c.tls == nil || c.Token() == "" {
		return nil, nil
	}
	a := &attacker{c: c, h: h, logf: logf}
	if err := a.prepare(ctx, prefix); err != nil {
		return nil, fmt.Errorf("attacker: %w", err)
	}
	actx, cancel := context.WithCancel(ctx)
	a.cancel, a.from = cancel, h.Now()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.raftLoop(actx) }()
	a.flood(actx, prefix)
	if a.etcd != nil {
		a.startEtcd(actx, leases, prefix)
		logf("attacker: etcd door attacks started from %s and %s", a.etcd.srcStreams, a.etcd.srcCalls)
	}
	logf("attacker: started (raft RPCs as node %q, HTTP flood with a read-only token)", intruderID)
	return a, nil
}

// prepare makes the intruder's certificate, the forged command and the read-only
// token, and records the ACL tokens and the configuration the check compares with.
func (a *attacker) prepare(ctx context.Context, prefix string) error {
	dir := a.c.tls.dir
	if err := a.c.tls.run("tls", "cert", "create", "-node", intruderID, "-ip", "127.0.0.1"); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, intruderID+".pem"), filepath.Join(dir, intruderID+"-key.pem"))
	if err != nil {
		return err
	}
	// The attacker does not care whom it reaches: only the server checks the peer.
	a.raftTLS = &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true} //nolint:gosec
	if a.forged, a.command, err = forgedTokenCommand(); err != nil {
		return err
	}
	root := a.rootClient()
	defer root.Close()
	if _, err := root.ACLPolicyPut(ctx, api.ACLPolicy{Name: "chaos-read-only",
		Keys: []api.ACLKeyRule{{Prefix: prefix, Access: api.AccessRead}}}); err != nil {
		return err
	}
	tok, err := root.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{"chaos-read-only"}})
	if err != nil {
		return err
	}
	a.roToken = tok.SecretID
	if err := a.prepareEtcd(ctx); err != nil {
		return err
	}
	if a.tokensBefore, err = a.tokens(ctx); err != nil {
		return err
	}
	a.membersBefore, err = a.configuration(ctx)
	return err
}

// forgedTokenCommand is a write of an ACL token record with the management policy,
// as the ACL routes store it (the records of package kv/acl), and the secret it would let in.
func forgedTokenCommand() (string, []byte, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	secret := "keel_" + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(secret))
	rec, _ := json.Marshal(map[string]any{"accessor_id": "00000000-0000-4000-8000-00000000dead",
		"policies": []string{api.ManagementPolicy}, "create_time": time.Now().UTC().Format(time.RFC3339)})
	cmd, err := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut,
		Key: []byte(versions.SystemPrefix + "acl/tokens/" + hex.EncodeToString(h[:])), Value: rec}}}})
	return secret, cmd, err
}

func (a *attacker) rootClient() *client.Client {
	var addrs []string
	for _, id := range a.c.Members() {
		addrs = append(addrs, a.c.HTTPAddr(id))
	}
	cl, err := client.New(addrs, client.Options{MaxRetries: 20, TLS: a.c.tls.client, Token: a.c.Token()})
	if err != nil {
		panic(fmt.Sprintf("chaos: attacker client: %v", err))
	}
	return cl
}

// tokens lists the accessor IDs of the ACL tokens, sorted.
func (a *attacker) tokens(ctx context.Context) ([]string, error) {
	cl := a.rootClient()
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	toks, err := cl.ACLTokenList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list ACL tokens: %w", err)
	}
	var out []string
	for _, t := range toks {
		out = append(out, t.AccessorID)
	}
	sort.Strings(out)
	return out, nil
}

// configuration is the leader's Raft configuration: "id@address/suffrage", sorted.
func (a *attacker) configuration(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	leader, err := WaitLeader(ctx, a.c)
	if err != nil {
		return nil, err
	}
	st, err := a.c.Client(leader).Status(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range st.Members {
		out = append(out, m.ID+"@"+m.Address+"/"+m.Suffrage)
	}
	sort.Strings(out)
	return out, nil
}

func (a *attacker) breach(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.breaches) < 20 {
		a.breaches = append(a.breaches, fmt.Sprintf(format, args...))
	}
}

// raftRequests are the RPCs the intruder sends, for member id.
func (a *attacker) raftRequests(id string) []struct {
	kind byte
	body []byte
} {
	as := binary.AppendUvarint(nil, 0)
	return []struct {
		kind byte
		body []byte
	}{
		{attackRPCApply, a.command},
		{attackRPCApplyLeases, a.command},
		{attackRPCApplyAs, append(as, a.command...)},
		{attackRPCRemove, []byte(id)},
		{attackRPCRetire, []byte(id)},
		{attackRPCTransfer, []byte(id)},
		{attackRPCAddVoter, []byte("intruder-2\x00127.0.0.1:1")},
		{attackRPCAddVoter, []byte(intruderID + "\x00127.0.0.1:1")},
	}
}

// raftLoop sends the intruder's RPCs to the members' raft ports (not through the
// fault proxies) until ctx ends, a few a second.
func (a *attacker) raftLoop(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		ids := a.c.Members()
		slices.Sort(ids)
		id := ids[i%len(ids)]
		n := a.c.node(id)
		reqs := a.raftRequests(ids[(i+1)%len(ids)])
		r := reqs[(i/len(ids))%len(reqs)]
		if answer, ok := a.raftCall(n.raftAddr, r.kind, r.body); ok {
			a.breach("raft rpc kind %d to %s as %q was answered ok: %q", r.kind, id, intruderID, answer)
		}
		a.raftTries.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// raftCall sends one request and reports whether the node answered it with success.
// A refused handshake, a closed connection or an error answer are all refusals.
func (a *attacker) raftCall(addr string, kind byte, body []byte) (string, bool) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, a.raftTLS)
	if err != nil {
		return "", false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(1+len(body)))
	w := bufio.NewWriter(conn)
	w.WriteByte(attackProtoRPC)
	w.Write(hdr[:])
	w.WriteByte(kind)
	w.Write(body)
	if w.Flush() != nil {
		return "", false
	}
	r := bufio.NewReader(conn)
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", false
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > 1<<20 {
		return "", false
	}
	resp := make([]byte, n)
	if _, err := io.ReadFull(r, resp); err != nil {
		return "", false
	}
	return string(resp[1:]), resp[0] == 0
}
