package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// A forwarded write carries its caller, and the leader checks it again.
//
// A follower that takes a client's write checks the client's rights itself, then
// forwards the command to the leader. With a caller on the context (WithCaller) it
// forwards it as rpcApplyAs, the caller's identity next to the command, and the
// leader runs its CallerChecker (kv's: the same key and reserved-prefix checks, against
// the leader's own ACL state) before appending the command; a refusal comes back as
// ErrCallerRefused and nothing is applied. This is Consul's model: a follower
// forwards the client's token with the RPC, and the leader authorizes it again.
//
// What it defends against: a follower whose ACL view is stale (a token deleted or a
// policy narrowed on the leader not yet applied there) or whose own check is wrong. It
// does not defend against a compromised member: a member may send commands without a
// caller (rpcApply, rpcApplyLeases), which the leader applies on the member's word,
// as it must for the node's own writes — the cluster secret, storage versions,
// migrations, lease expiry, ACL records written by the ACL routes, typed resources —
// which carry no caller. Only members may send them: with TLS, the raft port's
// membership authority (authority.go) refuses every RPC but a join from a node
// outside the configuration. Without TLS (-insecure) anyone who reaches the port can.
//
// A leader of a release before rpcApplyAs answers "unknown request kind" without
// applying anything; the follower then forwards the write without its caller, as that
// release did, and asks that leader again after oldLeaderRecheck.

// ErrCallerRefused: the leader's CallerChecker refused a forwarded write for the
// rights of its caller; nothing was applied.
var ErrCallerRefused = errors.New("raft: the leader refused the write for its caller's rights")

// CallerChecker decides on the leader whether a forwarded command may be applied for
// caller (the bytes the follower put on the context with WithCaller; opaque to raft).
// An error refuses it; raft wraps it in ErrCallerRefused unless it is one already.
type CallerChecker func(ctx context.Context, caller []byte, cmd *fsm.Command) error

// SetCallerChecker installs the check a leader runs on forwarded writes that carry a
// caller (at most one; the last call wins). Until one is installed such writes are
// refused with ErrNotLeader (retried): a leader never applies them unchecked. Safe for
// concurrent use.
func (n *Node) SetCallerChecker(c CallerChecker) { n.callerChecker.Store(&c) }

type callerKey struct{}

// WithCaller returns ctx carrying the identity of the client a write is made for
// (kv: its token, see kv's forwardedCaller); Apply on a follower forwards it to the
// leader with the command. id may be empty: a client without a token, whose command
// the leader still checks. The embedder checks the caller itself before Apply: the
// leader's check is the second one.
func WithCaller(ctx context.Context, id []byte) context.Context {
	if id == nil {
		id = []byte{}
	}
	return context.WithValue(ctx, callerKey{}, id)
}

// callerOf returns the caller of ctx; ok is false for a write of the node itself.
func callerOf(ctx context.Context) (id []byte, ok bool) {
	id, ok = ctx.Value(callerKey{}).([]byte)
	return id, ok
}

// applyAsBody is the body of rpcApplyAs: the caller's length (uvarint), the caller,
// then the encoded command.
func applyAsBody(caller []byte, d data) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen32+len(caller)+len(d)), uint64(len(caller)))
	b = append(b, caller...)
	return append(b, d...)
}

// applyAs answers rpcApplyAs on the leader: the checker decides, then the command is
// applied as a forwarded write is, and the result carries the keys' leases.
func (n *Node) applyAs(ctx context.Context, body []byte) ([]byte, error) {
	l, w := binary.Uvarint(body)
	if w <= 0 || l > uint64(len(body)-w) {
		return nil, errors.New("raft rpc: bad forwarded write with a caller")
	}
	caller, d := body[w:w+int(l)], data(body[w+int(l):])
	c := n.callerChecker.Load()
	if c == nil {
		return nil, fmt.Errorf("%w: this leader does not check callers yet", ErrNotLeader)
	}
	cmd, err := fsm.DecodeCommand(d)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", fsm.ErrInvalidCommand, err)
	}
	if err := (*c)(ctx, caller, cmd); err != nil {
		if !errors.Is(err, ErrCallerRefused) {
			err = fmt.Errorf("%w: %w", ErrCallerRefused, err)
		}
		return nil, err
	}
	res, err := n.applyLocal(d)
	if err != nil {
		return nil, err
	}
	return fsm.EncodeResultWithLeases(res)
}

// forwardAs forwards a write with its caller (rpcApplyAs). ok is false when the
// leader at addr predates rpcApplyAs (now or within oldLeaderRecheck): then nothing
// was applied and the caller forwards the write without it.
func (n *Node) forwardAs(ctx context.Context, addr string, caller []byte, d data) (res *fsm.Result, ok bool, err error) {
	if t, old := n.noCallerLeaders.Load(addr); old && time.Since(t.(time.Time)) < oldLeaderRecheck {
		return nil, false, nil
	}
	resp, err := n.forward(ctx, addr, rpcApplyAs, applyAsBody(caller, d))
	if isUnknownKind(err) {
		n.noCallerLeaders.Store(addr, time.Now())
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	res, err = fsm.DecodeResult(resp)
	return res, true, err
}

// callerCheckerSlot holds the installed CallerChecker.
type callerCheckerSlot = atomic.Pointer[CallerChecker]
