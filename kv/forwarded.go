package kv

import (
	"context"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/raft"
)

// A KV API transaction is applied with its caller on the context (applyTxn): a
// follower forwards the caller's identity to the leader with the command, and the
// leader checks the transaction again with checkTxn, against its own ACL state
// (raft/caller.go has the protocol and what it does not defend against).
//
// The identity is the SHA-256 hash of the token's secret, the key its record is
// stored under: the secret itself never leaves the node the client gave it to, and a
// stream connection, which keeps only the hash, forwards the same. It is not a proof
// of the client's presence — any member could send a command without a caller anyway
// (the node's own writes carry none) — but it lets the leader refuse a write its own
// view does not allow: a token deleted or a policy narrowed there, a follower's check
// that is stale or wrong. An empty identity is a client without a token (ACLs not
// enforced on the follower); the leader refuses it if its ACL system is bootstrapped.
//
// Only KV API transactions carry a caller. The writes of the other routes (ACL
// records, typed resources, leases, compaction) are checked by the node that takes
// the request, and the leader applies them on the member's word.

// callerID is the identity forwarded for az (nil: no token).
func callerID(az *acl.Authorizer) []byte {
	if az == nil {
		return []byte{}
	}
	h := az.Hash()
	return h[:]
}

// CallerCheckSetter is implemented by a Store (*raft.Node) that forwards writes with
// their caller; NewServer installs the leader's check (checkForwarded).
type CallerCheckSetter interface {
	SetCallerChecker(c raft.CallerChecker)
}

// checkForwarded is the leader's raft.CallerChecker: cmd, a KV API transaction a
// follower forwarded for caller, must pass checkTxn with the rights the leader's ACL
// state gives caller. Every refusal is ErrForbidden (403): the follower had accepted
// the token, so an unknown one here is a right withdrawn, not a missing credential.
func (s *Server) checkForwarded(ctx context.Context, caller []byte, cmd *fsm.Command) error {
	if cmd.Type != fsm.CmdTxn || cmd.Txn == nil {
		return fmt.Errorf("%w: %w: only KV API transactions are forwarded with a caller", raft.ErrCallerRefused, ErrForbidden)
	}
	az, err := s.callerAuthz(ctx, caller)
	if err == nil {
		err = s.checkTxn(ctx, az, cmd.Txn)
	}
	if err != nil {
		return fmt.Errorf("%w: %w: the leader re-checked the forwarded write: %v", raft.ErrCallerRefused, ErrForbidden, err)
	}
	return nil
}

// callerAuthz resolves a forwarded caller against this node's ACL state, as
// authenticate resolves a request's header.
func (s *Server) callerAuthz(ctx context.Context, caller []byte) (*acl.Authorizer, error) {
	st, err := s.aclStateConfirmed(ctx)
	if err != nil {
		return nil, err
	}
	if !st.Enforced() {
		return nil, s.notBootstrapped()
	}
	var h acl.SecretHash
	if len(caller) != len(h) {
		return nil, fmt.Errorf("%w: the write was forwarded without a token", ErrUnauthorized)
	}
	copy(h[:], caller)
	return s.tokenAuthz(ctx, st, h)
}
