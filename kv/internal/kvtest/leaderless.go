package kvtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/keel-kv/keel/raft"
)

// Leaderless is a LocalStore whose leader contact a test can cut (Cut): LeaderContact
// then answers raft.ErrNoLeader and the ContactContext is cancelled with it, as a
// raft.Node cut off from its leader does.
type Leaderless struct {
	*LocalStore
	lost   atomic.Bool
	mu     sync.Mutex
	cc     context.Context // as raft.Node's ContactContext
	cancel context.CancelCauseFunc
}

// Cut takes the store's leader contact away.
func (s *Leaderless) Cut() {
	s.lost.Store(true)
	s.ContactContext()
}

// ContactContext is live while the store has leader contact.
func (s *Leaderless) ContactContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc == nil {
		s.cc, s.cancel = context.WithCancelCause(context.Background())
	}
	if err := s.LeaderContact(); err != nil {
		s.cancel(err)
	}
	return s.cc
}

// LeaderContact is nil until Cut, raft.ErrNoLeader after.
func (s *Leaderless) LeaderContact() error {
	if s.lost.Load() {
		return fmt.Errorf("%w: test cut the node off", raft.ErrNoLeader)
	}
	return nil
}
