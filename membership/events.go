package membership

import (
	"context"
	"fmt"
)

// EventType says what changed about a member.
type EventType int

const (
	// EventJoin: a member became alive (new, or back after failing or leaving).
	EventJoin EventType = iota
	// EventLeave: a member left gracefully (Status left).
	EventLeave
	// EventUpdate: an alive member changed its metadata.
	EventUpdate
	// EventFailed: a member was declared dead (Status dead).
	EventFailed
)

func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	case EventFailed:
		return "failed"
	default:
		return fmt.Sprintf("EventType(%d)", int(t))
	}
}

// Event is one change to the member list. Member is the member's state when the
// event was delivered, so Type and Member.Status always agree.
//
// Delivery never blocks memberlist. memberlist's callbacks only record the change in
// a per-member pending slot and wake a pump goroutine, which moves pending events into
// the Events channel (capacity Config.EventBuffer) in arrival order. While the
// consumer is slower than the changes, a member's pending events coalesce into one
// describing its latest state: its Type is the newest change, except that a Join
// followed by Updates stays a Join (Stats().EventsCoalesced counts merged events).
// Nothing is dropped and memory is bounded by the number of members, but a consumer
// may see a member fail and rejoin as a single Join; consumers should treat events as
// "member X is now in state S" and reconcile idempotently (Members is always current).
type Event struct {
	Type   EventType
	Member Member
}

// coalesce merges a pending event of type old with a newer change of type next.
func coalesce(old, next EventType) EventType {
	if old == EventJoin && next == EventUpdate {
		return EventJoin
	}
	return next
}

// enqueueLocked records an event for delivery by the pump. Called with m.mu held.
func (m *Membership) enqueueLocked(t EventType, mem Member) {
	id := mem.Meta.NodeID
	if ev, ok := m.mu.pending[id]; ok {
		ev.Type = coalesce(ev.Type, t)
		ev.Member = mem.clone()
		m.mu.stats.EventsCoalesced++
	} else {
		m.mu.pending[id] = &Event{Type: t, Member: mem.clone()}
		m.mu.order = append(m.mu.order, id)
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// nextPending removes and returns the oldest pending event.
func (m *Membership) nextPending() (Event, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.mu.order) == 0 {
		return Event{}, false
	}
	id := m.mu.order[0]
	m.mu.order = m.mu.order[1:]
	ev := m.mu.pending[id]
	delete(m.mu.pending, id)
	return *ev, true
}

// pump delivers pending events to the Events channel until ctx is done. It is the
// channel's only sender, so a member's events arrive in the order they happened.
func (m *Membership) pump(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		for {
			ev, ok := m.nextPending()
			if !ok {
				break
			}
			select {
			case m.events <- ev:
				m.mu.Lock()
				m.mu.stats.EventsDelivered++
				m.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}
}
