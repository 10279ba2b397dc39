package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// apply replicates cmd and folds the state machine's own error (Result.Err) into the
// returned error, so callers see one error whether replication or the command failed.
func (s *Server) apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	res, err := s.store.Apply(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	if res == nil {
		return nil, errors.New("apply: store returned no result")
	}
	if res.Err != nil {
		return nil, fmt.Errorf("apply: %w", res.Err)
	}
	return res, nil
}

// applyTxn applies a transaction of the KV API as one command. Keys under
// versions.SystemPrefix are keel's own records (StorageVersion, StorageState): the KV
// API reads them but never writes them.
func (s *Server) applyTxn(ctx context.Context, txn *fsm.Txn) (*fsm.Result, error) {
	if err := checkSystemWrites(txn); err != nil {
		return nil, err
	}
	return s.apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
}

func checkSystemWrites(txn *fsm.Txn) error {
	sys := []byte(versions.SystemPrefix)
	sysEnd := fsm.PrefixEnd(sys)
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			hit := false
			switch op.Type {
			case fsm.OpPut, fsm.OpDelete:
				hit = bytes.HasPrefix(op.Key, sys)
			case fsm.OpDeleteRange:
				hit = bytes.Compare(op.Key, sysEnd) < 0 && (len(op.End) == 0 || bytes.Compare(op.End, sys) > 0)
			}
			if hit {
				return fmt.Errorf("%w: keys under %q are keel's own records and cannot be written through the KV API",
					ErrInvalidKey, versions.SystemPrefix)
			}
		}
	}
	return nil
}

// viewAt returns a view that can answer reads at rev with consistency c. A read at an
// explicit revision that this node has already applied needs no round trip to the
// leader: revision rev is immutable once applied, so the local view answers it exactly
// as the leader would. Otherwise the view has consistency c.
func (s *Server) viewAt(ctx context.Context, c raft.Consistency, rev int64) (*fsm.View, error) {
	if rev > 0 && c == raft.Linearizable {
		if v, err := s.store.View(ctx, raft.Serializable); err == nil && v.Revision() >= rev {
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
