package kv

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/keel-kv/keel/kv/api"
)

// Operator is what the service core needs of the node for the operator actions that
// reach beyond the replicated state: the Raft membership, saved snapshots and the data
// directory. The agent implements it and hands it over with SetOperator before
// serving; until then those actions answer ErrNotReady. Its methods are called
// concurrently; they check no right (the core does: CheckRight).
type Operator interface {
	// RemoveMember removes node id from the Raft configuration for good (with TLS its
	// certificates are revoked), as DELETE /v1/agent/peers/ID does: ErrNotMember when
	// it is not in the configuration, ErrLastVoter when the configuration has one
	// voter left.
	RemoveMember(ctx context.Context, id string) error
	// TransferLeadership hands leadership to the voter id, or to the most up-to-date
	// voter when id is "", from any node (POST /v1/agent/transfer-leader): ErrNotVoter
	// when id is not a voter of the configuration.
	TransferLeadership(ctx context.Context, id string) error
	// SaveEtcdSnapshot writes a saved snapshot file (GET /v1/agent/snapshot's) in an
	// envelope etcd's client keeps: padded to 512-byte pages and followed by its
	// sha256. It reflects every write acknowledged before the call.
	SaveEtcdSnapshot(ctx context.Context, w io.Writer) error
	// DataSize is the bytes the node's data directory holds on disk.
	DataSize() (int64, error)
}

// Errors of the Operator's membership actions; nothing changed.
var (
	// ErrNotMember: the node named is not in the Raft configuration.
	ErrNotMember = errors.New("kv: not a member")
	// ErrLastVoter: removing the node would leave the cluster without a voter.
	ErrLastVoter = errors.New("kv: refusing to remove the last voter")
	// ErrNotVoter: the node named cannot take leadership (no member, or no voter).
	ErrNotVoter = errors.New("kv: not a voter")
)

// SetOperator hands the core the node's operator actions.
func (s *Server) SetOperator(op Operator) { s.operator.Store(&op) }

// operatorOf is the Operator set, or ErrNotReady.
func (s *Server) operatorOf() (Operator, error) {
	if op := s.operator.Load(); op != nil {
		return *op, nil
	}
	return nil, fmt.Errorf("%w: the node's operator actions are not wired", ErrNotReady)
}

// operatorFor is the Operator set, for c, who needs right: the right is checked first
// (a caller without it learns nothing, not even whether the node is wired).
func (s *Server) operatorFor(c Caller, right string) (Operator, error) {
	if err := checkRight(c.az, right); err != nil {
		return nil, err
	}
	return s.operatorOf()
}

// DataSize is the bytes the node's data directory holds on disk (Operator.DataSize).
// It needs no right, as GET /v1/status needs none.
func (s *Server) DataSize() (int64, error) {
	op, err := s.operatorOf()
	if err != nil {
		return 0, err
	}
	return op.DataSize()
}

// RemoveMember removes node id from the Raft configuration for c, who needs the peers
// right; the right is checked before anything is
// looked up. An id that is not a member ("" included) is ErrNotMember.
func (s *Server) RemoveMember(ctx context.Context, c Caller, id string) error {
	op, err := s.operatorFor(c, api.RightPeers)
	if err != nil {
		return err
	}
	return op.RemoveMember(ctx, id)
}

// TransferLeadership hands leadership to the voter id, or to the most up-to-date voter
// when id is "" (Operator.TransferLeadership), for c, who needs the leadership right;
// the right is checked before anything is looked up.
func (s *Server) TransferLeadership(ctx context.Context, c Caller, id string) error {
	op, err := s.operatorFor(c, api.RightLeadership)
	if err != nil {
		return err
	}
	return op.TransferLeadership(ctx, id)
}

// SaveEtcdSnapshot writes a saved snapshot in its etcd envelope (Operator) to w for c,
// who needs the snapshot right.
func (s *Server) SaveEtcdSnapshot(ctx context.Context, c Caller, w io.Writer) error {
	op, err := s.operatorFor(c, api.RightSnapshot)
	if err != nil {
		return err
	}
	return op.SaveEtcdSnapshot(ctx, w)
}
