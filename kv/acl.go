package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// Access control. The ACL engine — the records, the rights of tokens, every right
// decision — is package kv/acl. What stays here is the node's side: the Server keeps
// the current acl.State (aclLoop rebuilds it when the watch hub reports a change under
// acl.Prefix), the operations that write the records (core_acl.go), and the one place a
// caller is authenticated (access.go). Enforcement starts when the bootstrap
// record exists; before that, Config.ACLDefault decides: "allow" serves everything (as
// a release without ACLs did), "deny" answers only the open routes (health, status,
// bootstrap).

// ACL defaults (Config.ACLDefault).
const (
	ACLAllow = "allow"
	ACLDeny  = "deny"
)

// checkGrant refuses to hand out (or take away) the rights of policies unless ctx's
// token holds every one of them (acl.Authorizer.CheckGrant). what says what the
// request does ("create a token").
func checkGrant(ctx context.Context, what string, policies ...api.ACLPolicy) error {
	return authzOf(ctx).CheckGrant(what, policies...)
}

// validatePolicy checks a policy before it is stored (acl.ValidatePolicy): a bad one is
// ErrInvalidBody.
func validatePolicy(p api.ACLPolicy) error {
	if err := acl.ValidatePolicy(p); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBody, err)
	}
	return nil
}

// checkPolicyWritable refuses any change to the built-in management policy (400, as
// its deletion always was).
func checkPolicyWritable(name string) error {
	if err := acl.CheckPolicyWritable(name); err != nil {
		return fmt.Errorf("acl policy: %w: %w", ErrInvalidBody, err)
	}
	return nil
}

// current returns the rights az's token holds now (acl.State.Current): a long-lived
// connection (the stream protocol) authenticates once but is checked against every
// policy change. A token deleted since is ErrUnauthorized.
func (s *Server) current(az *acl.Authorizer) (*acl.Authorizer, error) {
	st := s.acl.Load()
	if az == nil || st == nil {
		return az, nil
	}
	return st.Current(az, time.Now())
}

// aclStateNow returns the node's ACL state, reading it from the store the first time.
func (s *Server) aclStateNow(ctx context.Context) (*acl.State, error) {
	if st := s.acl.Load(); st != nil {
		return st, nil
	}
	return s.reloadACL(ctx, fsm.Serializable)
}

// reloadACL rebuilds the ACL state from a view of the store and publishes it (unless a
// newer one was published meanwhile).
func (s *Server) reloadACL(ctx context.Context, c fsm.Consistency) (*acl.State, error) {
	view, err := s.store.View(ctx, c)
	if err != nil {
		return nil, err
	}
	st, err := acl.Load(view, s.resourceGuard)
	if err != nil {
		return nil, err
	}
	for {
		old := s.acl.Load()
		if old != nil && old.Revision() >= st.Revision() {
			return old, nil
		}
		if s.acl.CompareAndSwap(old, st) {
			return st, nil
		}
	}
}

// aclLoop keeps Server.acl current: it rebuilds the state, then waits for the watch
// hub to report a change under acl.Prefix (or a restore), until stop is closed.
func (s *Server) aclLoop(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for ctx.Err() == nil {
		st, err := s.reloadACL(ctx, fsm.Serializable)
		if err == nil {
			var w *fsm.Watcher
			w, err = s.store.Watch(fsm.WatchOptions{Key: []byte(acl.Prefix), End: fsm.PrefixEnd([]byte(acl.Prefix)),
				StartRevision: st.Revision() + 1})
			if err == nil {
				_, err = w.Next(ctx)
				w.Close()
			}
			if errors.Is(err, fsm.ErrWatchRestored) {
				s.acl.Store(nil) // the restored state may be older: rebuild from scratch
				err = nil
			}
		}
		if err != nil && ctx.Err() == nil {
			s.log.Debug("acl: state refresh", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
