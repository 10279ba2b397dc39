package kvtest

import (
	"context"
	"sync"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// LeadingStore is a LocalStore that leads and serves leader calls itself, as a
// one-node raft.Node does: it satisfies kv/lease's LeaderCaller, so leases are kept
// alive and expire.
type LeadingStore struct {
	*LocalStore
	mu sync.Mutex
	h  raft.LeaderHandler
}

// NewLeading returns a LeadingStore over a fresh LocalStore.
func NewLeading() *LeadingStore { return &LeadingStore{LocalStore: New()} }

// CallLeader runs the installed leader handler (there is no other node).
func (s *LeadingStore) CallLeader(ctx context.Context, body []byte) ([]byte, error) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	return h(ctx, body)
}

// SetLeaderHandler installs the handler CallLeader runs.
func (s *LeadingStore) SetLeaderHandler(h raft.LeaderHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
}

// ApplyLeader is Apply: this store always leads.
func (s *LeadingStore) ApplyLeader(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	return s.Apply(ctx, cmd)
}
