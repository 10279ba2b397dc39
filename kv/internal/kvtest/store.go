// Package kvtest provides a kv.Store for the tests of kv and kv/client: a real
// fsm.Store, driven directly, WITHOUT replication. Commands are encoded with
// fsm.EncodeCommand and applied with an incrementing log index, exactly as raft's FSM
// goroutine would apply committed entries, and views come straight from the store, so
// every test exercises the real state machine; but there is no log, no leader
// election and no network, and linearizable and serializable views are the same.
// Replicated clusters are tested by package raft and by the end-to-end tests.
//
// It is test support only: no production code imports it.
package kvtest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// Secret is the cluster secret New installs.
var Secret = []byte("kvtest cluster secret, 32 bytes")

// LocalStore is a single-node, unreplicated store around a real fsm.Store. Safe for
// concurrent use: Apply calls are serialized like raft's FSM goroutine.
type LocalStore struct {
	fsm *fsm.Store
	// formatLimit is what CommandFormatLimit reports; 0 = fsm.MaxCommandFormat.
	formatLimit atomic.Uint32

	mu struct {
		sync.Mutex
		index    uint64 // last applied log index
		faultN   int    // calls left that fail with faultErr
		faultErr error
		noLeader bool
		hold     chan struct{} // linearizable views wait for it to close
		held     int           // views waiting on hold
	}
}

// CommandFormatLimit reports the newest command format every voter applies, as
// raft.Node does: fsm.MaxCommandFormat unless SetFormatLimit lowered it.
func (s *LocalStore) CommandFormatLimit() byte {
	if l := s.formatLimit.Load(); l != 0 {
		return byte(l)
	}
	return fsm.MaxCommandFormat
}

// SetFormatLimit makes CommandFormatLimit report limit, as when an older voter is in
// the cluster (0 restores the default).
func (s *LocalStore) SetFormatLimit(limit byte) { s.formatLimit.Store(uint32(limit)) }

// Held is the number of linearizable views waiting for HoldLinearizable's release.
func (s *LocalStore) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.held
}

// HoldLinearizable makes linearizable views wait (like a read index round that cannot
// complete) until the returned function is called.
func (s *LocalStore) HoldLinearizable() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.mu.hold = ch
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.mu.hold == ch {
			s.mu.hold = nil
		}
		s.mu.Unlock()
		close(ch)
	}
}

// New returns a store whose cluster secret is Secret.
func New() *LocalStore { return NewWithSecret(Secret) }

// NewWithSecret returns a store with the given cluster secret; nil means no secret
// until SetSecret (the store is then "not ready").
func NewWithSecret(secret []byte) *LocalStore {
	s := &LocalStore{fsm: fsm.NewStore()}
	if secret != nil {
		s.SetSecret(secret)
	}
	return s
}

// SetSecret applies the cluster meta command; later calls are no-ops in the fsm.
func (s *LocalStore) SetSecret(secret []byte) {
	s.applyLocked(&fsm.Command{Type: fsm.CmdClusterMeta, ClusterID: "kvtest", Secret: secret})
}

// FSM returns the underlying state machine.
func (s *LocalStore) FSM() *fsm.Store { return s.fsm }

// FailNext makes the next n calls of Apply and View fail with err (for example
// raft.ErrNoLeader) without touching the state machine.
func (s *LocalStore) FailNext(n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.faultN, s.mu.faultErr = n, err
}

// SetNoLeader makes Status report no known leader (for /readyz).
func (s *LocalStore) SetNoLeader(noLeader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.noLeader = noLeader
}

func (s *LocalStore) fault() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.faultN > 0 {
		s.mu.faultN--
		return s.mu.faultErr
	}
	return nil
}

// Apply encodes cmd and applies it at the next log index. After a compaction it also
// reclaims the compacted versions, as the node's compaction loop would.
func (s *LocalStore) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	if err := s.fault(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := s.applyLocked(cmd)
	if cmd.Type == fsm.CmdCompact && res.Err == nil {
		for {
			if _, more := s.fsm.CompactStep(1024); !more {
				break
			}
		}
	}
	return res, nil
}

func (s *LocalStore) applyLocked(cmd *fsm.Command) *fsm.Result {
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return &fsm.Result{Err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.index++
	return s.fsm.Apply(s.mu.index, data)
}

// ApplyBatch encodes cmds and applies them at consecutive log indexes in one
// fsm.Store.ApplyBatch, as raft's FSM goroutine hands over several committed entries
// at once (one view publish for all); a nil command is a no-op entry (a configuration
// change). It returns each command's result (nil for a no-op).
func (s *LocalStore) ApplyBatch(cmds []*fsm.Command) ([]*fsm.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries := make([]fsm.Entry, len(cmds))
	for i, cmd := range cmds {
		entries[i] = fsm.Entry{Index: s.mu.index + 1 + uint64(i), NoOp: cmd == nil}
		if cmd != nil {
			data, err := fsm.EncodeCommand(cmd)
			if err != nil {
				return nil, err
			}
			entries[i].Data = data
		}
	}
	s.mu.index += uint64(len(cmds))
	return s.fsm.ApplyBatch(entries), nil
}

// View returns the store's current view for either consistency.
func (s *LocalStore) View(ctx context.Context, c fsm.Consistency) (*fsm.View, error) {
	if err := s.fault(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	hold := s.mu.hold
	if hold != nil && c == fsm.Linearizable {
		s.mu.held++
	}
	s.mu.Unlock()
	if hold != nil && c == fsm.Linearizable {
		select {
		case <-hold:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.mu.held--
		s.mu.Unlock()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.fsm.View(), nil
}

// Watch starts a watcher on the state machine.
func (s *LocalStore) Watch(opts fsm.WatchOptions) (*fsm.Watcher, error) { return s.fsm.Watch(opts) }

// ClusterSecret waits until the cluster secret is set or ctx is done.
func (s *LocalStore) ClusterSecret(ctx context.Context) ([]byte, error) {
	for {
		if _, secret, ok := s.fsm.ClusterMeta(); ok {
			return secret, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Status reports a one-member cluster led by this node (unless SetNoLeader).
func (s *LocalStore) Status() raft.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := raft.Status{NodeID: "local", State: "Leader", LeaderID: "local", LeaderAddr: "127.0.0.1:0",
		Term: 1, CommitIndex: s.mu.index, AppliedIndex: s.mu.index, LastLogIndex: s.mu.index,
		Members: []raft.Member{{ID: "local", Address: "127.0.0.1:0", Suffrage: hraft.Voter, Leader: true}}}
	if s.mu.noLeader {
		st.State, st.LeaderID, st.LeaderAddr = "Follower", "", ""
		st.Members[0].Leader = false
	}
	return st
}
