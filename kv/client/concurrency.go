package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Concurrency recipes on leases and transactions, as etcd's clientv3/concurrency:
// a Session is a lease kept alive; a Mutex and an Election are keys attached to it.
//
// A Mutex named "locks/db" is a queue of keys "locks/db/<lease ID in hex>", each put
// with a guard that the key does not exist yet, so the key's create revision is fixed
// when the waiter joins. The waiter whose key has the lowest create revision holds the
// lock; every other waits for the key just ahead of it to be deleted (unlocked, or its
// session's lease expired or revoked). The holder's create revision is its fencing
// revision: holders follow each other in create-revision order, so fencing revisions
// strictly increase, and a resource that remembers the highest fencing revision it has
// seen can refuse a stale holder (one whose lease expired while it was paused).

// ErrSessionLost: the session's lease is gone; its locks and campaigns are void.
var ErrSessionLost = errors.New("client: session lost")

// Session is a lease kept alive by the client until Close or until it is lost.
type Session struct {
	c      *Client
	id     int64
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// NewSession grants a lease of ttl and keeps it alive.
func NewSession(ctx context.Context, c *Client, ttl time.Duration) (*Session, error) {
	g, err := c.Grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	s := &Session{c: c, id: g.ID, cancel: cancel, done: make(chan struct{})}
	lost := c.KeepAlive(kctx, g.ID)
	go func() {
		err, ok := <-lost
		if ok {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
		close(s.done)
	}()
	return s, nil
}

// Lease is the session's lease ID.
func (s *Session) Lease() int64 { return s.id }

// Done is closed when the session ends: lost (Err says why) or closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the session ended; nil while it lives or after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the keepalives and revokes the lease, deleting its keys (releasing its
// locks) at once.
func (s *Session) Close(ctx context.Context) error {
	s.cancel()
	<-s.done
	_, err := s.c.Revoke(ctx, s.id)
	if IsLeaseNotFound(err) {
		return nil
	}
	return err
}

// Mutex is a distributed lock held by a Session.
type Mutex struct {
	s      *Session
	prefix string
	key    string
	rev    int64
}

// NewMutex returns the lock named name (a key prefix) for session s.
func NewMutex(s *Session, name string) *Mutex {
	return &Mutex{s: s, prefix: name + "/", key: fmt.Sprintf("%s/%016x", name, s.id)}
}

// Key is the waiter's key; Revision its create revision: the fencing revision once
// Lock returned.
func (m *Mutex) Key() string     { return m.key }
func (m *Mutex) Revision() int64 { return m.rev }

// Lock waits until m holds the lock, ctx ends or the session is lost. On an error the
// waiter's key is deleted (it does not stay queued).
func (m *Mutex) Lock(ctx context.Context) error {
	rev, err := m.join(ctx, nil)
	if err != nil {
		return err
	}
	m.rev = rev
	if err := m.waitTurn(ctx); err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.c().Delete(dctx, m.key)
		m.rev = 0
		return err
	}
	return nil
}

func (m *Mutex) c() *Client { return m.s.c }

// join puts the waiter's key attached to the session's lease unless it exists, and
// returns its create revision.
func (m *Mutex) join(ctx context.Context, value []byte) (int64, error) {
	txn := &api.TxnRequest{
		Compare: []api.Compare{{Key: m.key, Target: api.TargetCreateRevision, Result: api.ResultEqual, Int: 0}},
		Success: []api.Op{{Type: api.OpPut, Key: m.key, Value: value, Lease: m.s.id}},
		Failure: []api.Op{{Type: api.OpGet, Key: m.key}},
	}
	resp, err := m.c().Txn(ctx, txn)
	if err != nil {
		return 0, err
	}
	if resp.Succeeded {
		return resp.Revision, nil
	}
	if len(resp.Responses) == 0 || len(resp.Responses[0].KVs) == 0 {
		return 0, fmt.Errorf("client: lock %s: key vanished while joining", m.key)
	}
	return resp.Responses[0].KVs[0].CreateRevision, nil
}

// waitTurn waits until no key of the lock has a create revision below m.rev.
func (m *Mutex) waitTurn(ctx context.Context) error {
	for {
		select {
		case <-m.s.done:
			return fmt.Errorf("%w: %v", ErrSessionLost, m.s.Err())
		default:
		}
		list, err := m.c().List(ctx, m.prefix, ListOptions{})
		if err != nil {
			return err
		}
		var ahead *api.KV
		mine := false
		for i := range list.Items {
			kv := &list.Items[i]
			if kv.Key == m.key {
				mine = true
				continue
			}
			if kv.CreateRevision < m.rev && (ahead == nil || kv.CreateRevision > ahead.CreateRevision) {
				ahead = kv
			}
		}
		if !mine {
			return fmt.Errorf("%w: lock key %s is gone (lease expired or revoked)", ErrSessionLost, m.key)
		}
		if ahead == nil {
			return nil
		}
		if err := m.waitDeleted(ctx, ahead.Key, list.Revision); err != nil {
			return err
		}
	}
}

// waitDeleted waits until key is deleted after revision rev (or the session ends).
func (m *Mutex) waitDeleted(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := m.c().Watch(wctx, key, WatchOptions{Key: true, StartRevision: rev + 1, Progress: time.Second})
	for {
		select {
		case <-m.s.done:
			return fmt.Errorf("%w: %v", ErrSessionLost, m.s.Err())
		case ev, ok := <-events:
			switch {
			case !ok:
				return ctx.Err()
			case ev.Err != nil:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return nil // list again
			case ev.Type == api.EventDelete:
				return nil
			}
		}
	}
}

// Unlock releases the lock: the waiter's key is deleted.
func (m *Mutex) Unlock(ctx context.Context) error {
	_, err := m.c().Delete(ctx, m.key)
	m.rev = 0
	return err
}

// Election elects one leader among the sessions campaigning under a prefix: the
// campaigner whose key has the lowest create revision leads; its value is what
// Leader returns, and its create revision is its fencing revision.
type Election struct{ m *Mutex }

// NewElection returns the election named name for session s.
func NewElection(s *Session, name string) *Election { return &Election{m: NewMutex(s, name)} }

// Campaign waits until this session leads, announcing value.
func (e *Election) Campaign(ctx context.Context, value string) error {
	rev, err := e.m.join(ctx, []byte(value))
	if err != nil {
		return err
	}
	e.m.rev = rev
	if err := e.m.waitTurn(ctx); err != nil {
		e.m.c().Delete(context.WithoutCancel(ctx), e.m.key)
		e.m.rev = 0
		return err
	}
	return nil
}

// Revision is the leader's fencing revision (0 when not leading).
func (e *Election) Revision() int64 { return e.m.rev }

// Resign gives leadership up.
func (e *Election) Resign(ctx context.Context) error { return e.m.Unlock(ctx) }

// Leader returns the current leader's key-value (the lowest create revision), or a
// 404 error (IsNotFound) when nobody leads.
func (e *Election) Leader(ctx context.Context) (*api.KV, error) {
	list, err := e.m.c().List(ctx, e.m.prefix, ListOptions{})
	if err != nil {
		return nil, err
	}
	var lead *api.KV
	for i := range list.Items {
		if kv := &list.Items[i]; lead == nil || kv.CreateRevision < lead.CreateRevision {
			lead = kv
		}
	}
	if lead == nil {
		return nil, &Error{Code: 404, Reason: api.ReasonNotFound, Message: "no leader in election " + e.m.prefix}
	}
	return lead, nil
}
