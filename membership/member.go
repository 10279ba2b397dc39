package membership

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Status is a member's liveness as this node sees it.
type Status int

const (
	// StatusAlive: the member answers probes (or has not yet been declared failed).
	StatusAlive Status = iota
	// StatusSuspect is reserved for a member memberlist suspects but has not yet
	// declared failed. memberlist v0.7.0 does not expose suspicion, so this package
	// reports such a member as alive until it is declared dead; consumers must accept
	// StatusSuspect if a later backend reports it.
	StatusSuspect
	// StatusDead: the member stopped answering and was declared failed.
	StatusDead
	// StatusLeft: the member announced its departure with Leave.
	StatusLeft
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusSuspect:
		return "suspect"
	case StatusDead:
		return "dead"
	case StatusLeft:
		return "left"
	default:
		return fmt.Sprintf("Status(%d)", int(s))
	}
}

// Member is one node as this node last saw it.
type Member struct {
	// Meta is the member's latest metadata (for a dead or left member: its last).
	Meta Meta
	// Addr is the member's gossip address, IP:port.
	Addr string
	// Status is its liveness.
	Status Status
	// LastChange is when this node last saw Status change (join, failure, leave). A
	// reconciler reaps a member dead for longer than its threshold with
	// time.Since(LastChange).
	LastChange time.Time
}

// ID returns the member's NodeID.
func (m Member) ID() string { return m.Meta.NodeID }

// Gone reports whether the member is dead or left.
func (m Member) Gone() bool { return m.Status == StatusDead || m.Status == StatusLeft }

func (m Member) clone() Member {
	m.Meta = m.Meta.Clone()
	return m
}

// sortMembers orders members by NodeID, the order every result of this package uses.
func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.Meta.NodeID, b.Meta.NodeID) })
}
