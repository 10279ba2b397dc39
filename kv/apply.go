package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/raft"
)

// apply replicates cmd and folds the state machine's own error (Result.Err) into the
// returned error, so callers see one error whether replication or the command failed.
// Every write of the API goes through it, so it refuses here, before anything is
// proposed, a transaction branch that writes a key twice (fsm.ErrDuplicateKey, by
// keel's rule: TxnOptions.checkDuplicates): the state machine itself still applies
// such entries (see fsm.CheckDuplicateKeys). A KV API transaction comes through
// applyTxn, which checks it by the rule its door asked for.
func (s *Server) apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if cmd.Type == fsm.CmdTxn {
		if err := (TxnOptions{}).checkDuplicates(cmd.Txn); err != nil {
			return nil, err
		}
	}
	return s.propose(ctx, cmd)
}

// propose is apply without the duplicate-key check, for a caller that made its own.
func (s *Server) propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := s.store.Apply(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", leaseFormatError(err))
	}
	if res == nil {
		return nil, errors.New("apply: store returned no result")
	}
	if res.Err != nil {
		return nil, fmt.Errorf("apply: %w", res.Err)
	}
	return res, nil
}

// applyTxn applies a transaction of the KV API as one command: the duplicate-key rule
// opts choose (TxnOptions.checkDuplicates), the limits, then checkTxn. The command
// carries its caller (raft.WithCaller): a follower forwards it to the leader, which
// checks it again with checkTxn (forwarded.go).
func (s *Server) applyTxn(ctx context.Context, txn *fsm.Txn, opts TxnOptions) (*fsm.Result, error) {
	if err := opts.checkDuplicates(txn); err != nil {
		return nil, err
	}
	fold := func(r *fsm.Result) *fsm.Result { return r }
	if opts.DeleteAroundReserved && s.checkReservedWrites(txn) != nil {
		txn, fold = s.carveReserved(txn) // a wipe: what it may delete, one revision
	}
	if err := s.lim.checkTxn(txn); err != nil {
		return nil, err
	}
	az := authzOf(ctx)
	if !s.skipLocalTxnCheck {
		if err := s.checkTxn(ctx, az, txn); err != nil {
			return nil, err
		}
	}
	res, err := s.propose(raft.WithCaller(ctx, callerID(az)), &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	return fold(res), err
}

// checkTxn is the one check of a KV API transaction before it is applied: the token's
// rights on every key it touches (checkTxnAccess; az nil when ACLs are not enforced),
// the reserved prefixes (checkReservedWrites) and its right on every lease a put
// attaches a key to (checkTxnLeases). The node that takes the request runs it, and so
// does the leader a follower forwards the transaction to.
func (s *Server) checkTxn(ctx context.Context, az *acl.Authorizer, txn *fsm.Txn) error {
	if err := checkTxnAccess(az, txn); err != nil {
		return err
	}
	if err := s.checkReservedWrites(txn); err != nil {
		return err
	}
	return s.checkTxnLeases(Caller{az: az}.context(ctx), txn)
}

// viewAt returns a view that can answer reads at rev with consistency c. A read at an
// explicit revision that this node has already applied needs no round trip to the
// leader: revision rev is immutable once applied, so the local view answers it exactly
// as the leader would. Otherwise the view has consistency c.
func (s *Server) viewAt(ctx context.Context, c fsm.Consistency, rev int64) (*fsm.View, error) {
	if rev > 0 && c == fsm.Linearizable {
		if v, err := s.store.View(ctx, fsm.Serializable); err == nil && v.Revision() >= rev {
			return v, nil
		}
	}
	v, err := s.store.View(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return v, nil
}

// revisionError adds the numbers a client needs to a compacted/future revision error.
func revisionError(v *fsm.View, rev int64, err error) error {
	switch {
	case errors.Is(err, fsm.ErrCompacted):
		return fmt.Errorf("revision %d is compacted (compact revision %d): %w", rev, v.CompactRevision(), err)
	case errors.Is(err, fsm.ErrFutureRevision):
		return fmt.Errorf("revision %d is newer than the current revision %d: %w", rev, v.Revision(), err)
	}
	return err
}
