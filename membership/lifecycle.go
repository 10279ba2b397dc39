package membership

import (
	"context"
	"fmt"
	"time"
)

// UpdateMeta replaces the local metadata and broadcasts it, waiting until memberlist
// has sent it to the cluster (peers then see it within a gossip round, and every
// peer within a full state sync at the latest). NodeID and ClusterLabel may be empty
// but must not change; Incarnation is kept as Open chose it and Leaving is ignored.
//
// A metadata error (ErrInvalidMeta, ErrMetaTooLarge) changes nothing. If the
// broadcast is not confirmed before ctx's deadline (or Config.BroadcastTimeout) the
// new metadata is still in effect locally and spreads later: the error wraps
// ErrBroadcastTimeout (or ctx's error).
func (m *Membership) UpdateMeta(ctx context.Context, meta Meta) error {
	meta, err := m.cfg.prepareMeta(meta)
	if err != nil {
		return err
	}
	meta.Incarnation, meta.Leaving = m.incarnation, false
	encoded, err := EncodeMeta(meta)
	if err != nil {
		return err
	}
	m.mu.Lock()
	switch {
	case m.mu.closed:
		m.mu.Unlock()
		return ErrClosed
	case m.mu.left:
		m.mu.Unlock()
		return ErrLeft
	}
	m.mu.local, m.mu.localBytes = meta, encoded
	m.mu.Unlock()
	if err := m.broadcast(ctx, 0, m.updateNode); err != nil {
		return fmt.Errorf("update metadata: %w", err)
	}
	return nil
}

func (m *Membership) updateNode(timeout time.Duration) error { return m.ml.UpdateNode(timeout) }
func (m *Membership) leaveNode(timeout time.Duration) error  { return m.ml.Leave(timeout) }

// broadcast runs op (a memberlist call that waits for its broadcast up to a timeout)
// waiting at most timeout (<= 0: Config.BroadcastTimeout), less if ctx's deadline is
// sooner. It holds lifecycle so Close cannot
// shut memberlist down under it, and returns early with ctx's error if ctx ends.
func (m *Membership) broadcast(ctx context.Context, timeout time.Duration, op func(time.Duration) error) error {
	if timeout <= 0 {
		timeout = m.cfg.BroadcastTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return ctx.Err()
	}
	m.lifecycle.RLock()
	m.mu.Lock()
	closed := m.mu.closed
	m.mu.Unlock()
	if closed {
		m.lifecycle.RUnlock()
		return ErrClosed
	}
	done := make(chan error, 1)
	go func() {
		defer m.lifecycle.RUnlock()
		done <- op(timeout)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBroadcastTimeout, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave departs gracefully: it marks the local metadata Leaving and broadcasts it,
// then broadcasts memberlist's leave, so peers record this node as left (Status left,
// EventLeave) rather than failed. Each broadcast waits at most timeout (<= 0:
// Config.BroadcastTimeout), less if ctx's deadline is sooner. Gossip keeps running
// until Close so the leave can spread; call Close next. Later calls return nil.
//
// A peer that misses the Leaving update still records a leave when memberlist's own
// leave message reaches it (the node announced its departure itself); one that misses
// both (a partition) records the node as failed; both mean "gone" to a reconciler.
func (m *Membership) Leave(ctx context.Context, timeout time.Duration) error {
	m.mu.Lock()
	switch {
	case m.mu.closed:
		m.mu.Unlock()
		return ErrClosed
	case m.mu.left:
		m.mu.Unlock()
		return nil
	}
	m.mu.left = true
	meta := m.mu.local.Clone()
	meta.Leaving = true
	encoded, err := EncodeMeta(meta)
	if err == nil {
		m.mu.local, m.mu.localBytes = meta, encoded
	}
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("leave: %w", err) // a Leaving flag adds 3 bytes; only at the limit
	}
	m.logger.Info("leaving cluster", "node", m.cfg.NodeID)
	if err := m.broadcast(ctx, timeout, m.updateNode); err != nil {
		m.logger.Warn("leave intent not confirmed; some peers may record this node as failed", "error", err)
	}
	if err := m.broadcast(ctx, timeout, m.leaveNode); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

// Close stops gossip at once, without a leave message (peers declare this node failed
// after their probe timeouts; call Leave first to depart gracefully), stops the
// goroutines Open started and closes the Events channel. It waits for in-flight
// broadcasts and joins (bounded by their timeouts) unless ctx ends first. Later calls
// return nil.
func (m *Membership) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil
	}
	m.mu.closed = true
	m.mu.Unlock()
	close(m.closing)
	m.cancel()

	done := make(chan struct{})
	go func() {
		m.lifecycle.Lock()
		if err := m.ml.Shutdown(); err != nil {
			m.logger.Warn("gossip shutdown", "error", err)
		}
		m.lifecycle.Unlock()
		m.wg.Wait()
		close(m.events) // the pump, its only sender, has returned
		close(done)
	}()
	defer m.mlLog.close() // after Shutdown's own lines; a probe still in flight is silent
	select {
	case <-done:
		m.logger.Info("gossip stopped", "node", m.cfg.NodeID)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close membership: %w", ctx.Err())
	}
}
