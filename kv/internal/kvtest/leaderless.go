package kvtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/raft"
)

// Leaderless is a LocalStore whose leader contact a test can cut (Cut): LeaderContact
// then answers raft.ErrNoLeader and the ContactContext is cancelled with it, as a
// raft.Node cut off from its leader does.
type Leaderless struct {
	*LocalStore
	// StreamGrace, when set, gives the store a StreamContext (raft.Node's) that is
	// cancelled StreamGrace after Cut; without it the store has none.
	StreamGrace time.Duration
	lost        atomic.Bool
	mu          sync.Mutex
	cc          context.Context // as raft.Node's ContactContext
	cancel      context.CancelCauseFunc
	sc          context.Context // as raft.Node's StreamContext
	scStop      context.CancelCauseFunc
}

// Cut takes the store's leader contact away.
func (s *Leaderless) Cut() {
	s.lost.Store(true)
	s.ContactContext()
	if s.StreamGrace > 0 {
		sc := s.StreamContext()
		time.AfterFunc(s.StreamGrace, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.sc == sc {
				s.scStop(fmt.Errorf("%w: test cut the node off %s ago", raft.ErrNoLeader, s.StreamGrace))
			}
		})
	}
}

// StreamContext is live until StreamGrace after Cut; without a StreamGrace it is the
// ContactContext (no grace).
func (s *Leaderless) StreamContext() context.Context {
	if s.StreamGrace <= 0 {
		return s.ContactContext()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sc == nil {
		s.sc, s.scStop = context.WithCancelCause(context.Background())
	}
	return s.sc
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
