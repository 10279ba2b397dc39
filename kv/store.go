package kv

import (
	"context"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// Store is what the server needs from the replicated state machine; *raft.Node
// satisfies it. All methods are called concurrently from many requests.
type Store interface {
	// Apply replicates cmd and returns the state machine's Result. Errors are
	// replication errors only (raft.ErrNoLeader, raft.ErrTimeout, raft.ErrShutdown,
	// ctx errors); a failed guard or an invalid command is a Result.
	Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	// View returns an immutable view of the store; Linearizable reflects every write
	// acknowledged before the call, Serializable the local state.
	View(ctx context.Context, c fsm.Consistency) (*fsm.View, error)
	// ClusterSecret waits for the replicated cluster secret (it never changes once set).
	ClusterSecret(ctx context.Context) ([]byte, error)
	// Status reports the node's raft state without blocking.
	Status() raft.Status
	// Watch starts a watcher over the node's applied state (fsm.Store.Watch).
	Watch(opts fsm.WatchOptions) (*fsm.Watcher, error)
}
