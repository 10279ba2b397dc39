package fsm

import (
	"fmt"

	"github.com/google/btree"
)

// Leases. A lease is a replicated record {ID, TTL, Remaining, CheckpointIndex}; keys
// put with Op.Lease are attached to it and deleted, all at one revision, when it is
// revoked. The state machine never looks at a clock: when a lease expires is decided by
// the leader (kv's lessor) and applied as a CmdLeaseRevoke like any other command.
//
// What is replicated, and why. etcd keeps only the TTL in replicated state, and a new
// leader restarts every lease at its full TTL (etcd issues 9395, 9888): a leader change
// renews every lease, and repeated changes keep a dead client's keys forever. keel
// replicates, per lease, Remaining: the time left at the moment the command that last
// wrote it (grant, renewal or checkpoint) was proposed, and CheckpointIndex, the log
// index of that command. Every node's lessor notes, with its own monotonic clock, when
// it first saw each CheckpointIndex applied (seen). A node that becomes leader starts
// each lease's deadline at seen + Remaining, never at the full TTL. Since seen is never
// before the proposal, seen + Remaining is never before the deadline the proposer had
// in memory; it is later by the proposal-to-apply lag only (plus the lessor's polling
// interval), not by the time the cluster spent without a leader: the follower's clock
// kept running through the election.
//
// Keepalives. A keepalive reaches the leader (followers forward it) and sets the
// lease's in-memory deadline D to now + TTL. It writes no Raft entry if the leader's
// promise for the lease — the deadline it had when it computed a checkpoint that has
// applied since, which every successor honours — is still at least TTL/2 away: the
// response then promises that. Otherwise the renewal is written, batched with every
// other renewal waiting at that moment, in ONE CmdLeaseCheckpoint, and the keepalive
// is answered after it applied, promising the full TTL. Independently the leader
// writes a CmdLeaseCheckpoint every checkpoint interval (1 s) holding Remaining =
// D − now of every lease whose deadline moved since the last one: one entry for all
// leases, which lifts every promise to D, so keepalives of a client that sends them
// every TTL/3 almost never write anything.
//
// Worked example (TTL 10 s, three nodes; times on each node's own clock).
//
//	t=0     grant of lease 7 applies at index 40 {TTL 10s, Remaining 10s}; n1 leads.
//	        n1 and n2 see it at t≈0.05 (their 50 ms polls): deadline on n1 0.05.
//	t=0.1   client keepalive → n1: D = 10.1; no promise yet: renewal entry 41
//	        {7: Remaining 10s} applies; answered "ttl 9.9s".
//	t=3     keepalive → n1: D = 13; promise 10.1 is 7.1 s away ≥ 5 s: answered
//	        from memory, "ttl 7.1s", no entry.
//	t=3.5   n1's checkpoint tick: index 55 {7: Remaining 9.5s} (13 − 3.5).
//	        n2 sees 55 at 3.52: floor on n2 = 13.02. n1's promise becomes 13.
//	t=4     n1 crashes. No leader until n2 wins at t=5.2.
//	t=5.2   n2 leads; deadline of 7 = its floor 13.02 (not 15.2 as in etcd: the
//	        election did not renew the lease, and n2's clock counted the 1.2 s
//	        without leader). n2 has promised nothing yet for 7: the next keepalive
//	        writes a renewal entry.
//	t=13.02 no keepalive came: n2 proposes CmdLeaseRevoke{7}; its keys are deleted
//	        at one revision; watchers see one revision of deletes.
//
// The bound. Let D be a lease's deadline, the last keepalive the leader received plus
// TTL (or the grant plus TTL). The lease is revoked no later than D + L·(lag + poll) +
// max(tick, the time no leader was known at D) + one commit, where L is the number of
// leader changes since D was set, lag the apply lag of a checkpoint on the next leader
// (milliseconds in a healthy cluster), poll the lessor's polling interval (50 ms) and
// tick the expiry check interval (100 ms). With the default election timeout (1 s)
// and fewer than ten leader changes per lease lifetime this is D + one election
// timeout; a whole-cluster restart adds its downtime (no clock runs then), as it
// must. A lease is never revoked before what a keepalive response promised (the
// floor), nor, while one leader serves, before D.
type Lease struct {
	ID  int64
	TTL int64 // milliseconds, in [MinLeaseTTL, MaxLeaseTTL]
	// Remaining is the time left, in milliseconds, when the command that wrote it was
	// proposed (the grant, a renewal, a checkpoint); 0..TTL.
	Remaining int64
	// CheckpointIndex is the log index of that command.
	CheckpointIndex uint64
	// Owner says who may use the lease, in words of the grant's proposer (package kv:
	// the policies of the token that granted it); "" none. The state machine only
	// keeps it: set by the grant, never changed, gone with the lease, in snapshots
	// (format 4) and so on every node. At most MaxLeaseOwner bytes.
	Owner string
}

// MaxLeaseOwner bounds Lease.Owner, in bytes.
const MaxLeaseOwner = 16 << 10

// Lease TTL limits, in milliseconds: 1 s ≤ TTL ≤ 1 day.
const (
	MinLeaseTTL int64 = 1000
	MaxLeaseTTL int64 = 24 * 3600 * 1000
)

// LeaseCheckpoint sets one lease's Remaining (CmdLeaseCheckpoint).
type LeaseCheckpoint struct {
	ID        int64
	Remaining int64 // milliseconds; clamped to [0, TTL]
}

// MaxLeaseBatch bounds the leases one CmdLeaseCheckpoint or CmdLeaseRevoke names.
const MaxLeaseBatch = 10000

// leaseKey is one attachment: key is attached to lease id.
type leaseKey struct {
	id  int64
	key string
}

func leaseKeyLess(a, b leaseKey) bool {
	if a.id != b.id {
		return a.id < b.id
	}
	return a.key < b.key
}

func leaseLess(a, b *Lease) bool { return a.ID < b.ID }

// leaseState is the leases part of state: both trees are copy-on-write, cloned in O(1)
// at every publish like the key tree; a *Lease in them is never modified.
type leaseState struct {
	leases   *btree.BTreeG[*Lease]
	attached *btree.BTreeG[leaseKey]
	// used is set by the first grant and by a restore of a format 3 snapshot, and never
	// cleared: until then no version carries a lease, and snapshots are written in
	// format 2, which nodes of the previous release restore (a cluster that still has
	// one of them cannot grant: the command format gate refuses CmdLeaseGrant).
	used bool
	// gen counts the changes to the leases (grants, checkpoints, revokes, restores):
	// observers of the leases skip a view whose gen they have seen. changed[i] is the
	// lease that change journalBase+i+1 touched; it is only appended to (a view's
	// slice never sees later appends) and starts afresh at a restore or when long, so
	// an observer catches up on a few changes without walking every lease.
	gen         uint64
	journalBase uint64
	changed     []int64
}

// maxLeaseJournal bounds the changes a lease state remembers (8 bytes each).
const maxLeaseJournal = 1 << 16

// noteChange records a change to lease id.
func (ls *leaseState) noteChange(id int64) {
	if len(ls.changed) >= maxLeaseJournal {
		ls.changed, ls.journalBase = nil, ls.gen
	}
	ls.gen++
	ls.changed = append(ls.changed, id)
}

func newLeaseState() leaseState {
	return leaseState{leases: btree.NewG(btreeDegree, leaseLess), attached: btree.NewG(btreeDegree, leaseKeyLess)}
}

// shared is ls for a view: the same trees, which neither may write (the store clones
// them before its next lease write, ownLeasesLocked), and the change journal capped,
// so the store's appends copy it.
func (ls leaseState) shared() leaseState {
	ls.changed = ls.changed[:len(ls.changed):len(ls.changed)]
	return ls
}

// ownLeasesLocked makes cur's lease trees private to cur before a write: the first
// lease write after a publish clones them (O(1), copy-on-write).
func (s *Store) ownLeasesLocked() {
	if s.leasesOwned {
		return
	}
	s.cur.ls.leases, s.cur.ls.attached = s.cur.ls.leases.Clone(), s.cur.ls.attached.Clone()
	s.leasesOwned = true
}

func (ls leaseState) get(id int64) (*Lease, bool) { return ls.leases.Get(&Lease{ID: id}) }

// snapshotFormat is the oldest snapshot format that holds ls (snapshot.go): 4 while
// some lease has an owner, 3 once a lease was granted, else 2. It looks at every lease
// in the worst case (none owned), a small cost beside the snapshot's keys.
func (ls leaseState) snapshotFormat() byte {
	if !ls.used {
		return snapshotFormatV2
	}
	format := snapshotFormatV3
	ls.leases.Ascend(func(l *Lease) bool {
		if l.Owner != "" {
			format = snapshotFormatV4
		}
		return format == snapshotFormatV3
	})
	return format
}

// attachLocked moves key's attachment from lease old to lease new (0 = none).
func (s *Store) attachLocked(key []byte, old, new int64) {
	if old == new {
		return
	}
	s.ownLeasesLocked()
	if old != 0 {
		s.cur.ls.attached.Delete(leaseKey{id: old, key: string(key)})
	}
	if new != 0 {
		s.cur.ls.attached.ReplaceOrInsert(leaseKey{id: new, key: string(key)})
	}
}

func validLeaseTTL(ttl int64) bool { return ttl >= MinLeaseTTL && ttl <= MaxLeaseTTL }

// leaseGrantLocked creates lease id with ttl (ms), owned by owner.
func (s *Store) leaseGrantLocked(id, ttl int64, owner string) *Result {
	switch {
	case id <= 0:
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: lease ID %d must be > 0", ErrInvalidCommand, id)}
	case !validLeaseTTL(ttl):
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: lease TTL %d ms outside [%d, %d]",
			ErrInvalidCommand, ttl, MinLeaseTTL, MaxLeaseTTL)}
	case len(owner) > MaxLeaseOwner:
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: lease owner of %d bytes (at most %d)",
			ErrInvalidCommand, len(owner), MaxLeaseOwner)}
	}
	if _, ok := s.cur.ls.get(id); ok {
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: %d", ErrLeaseExists, id)}
	}
	s.ownLeasesLocked()
	s.cur.ls.leases.ReplaceOrInsert(&Lease{ID: id, TTL: ttl, Remaining: ttl, CheckpointIndex: s.cur.applied, Owner: owner})
	s.cur.ls.used = true
	s.cur.ls.noteChange(id)
	return &Result{Revision: s.cur.revision, Succeeded: true}
}

// leaseCheckpointLocked sets Remaining of the named leases that exist; others are
// skipped (revoked meanwhile). Succeeded says every lease existed.
func (s *Store) leaseCheckpointLocked(cps []LeaseCheckpoint) *Result {
	if len(cps) > MaxLeaseBatch {
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: %d leases in one checkpoint", ErrInvalidCommand, len(cps))}
	}
	all := true
	for _, cp := range cps {
		l, ok := s.cur.ls.get(cp.ID)
		if !ok {
			all = false
			continue
		}
		s.cur.ls.noteChange(l.ID)
		s.ownLeasesLocked()
		s.cur.ls.leases.ReplaceOrInsert(&Lease{ID: l.ID, TTL: l.TTL, Remaining: min(max(cp.Remaining, 0), l.TTL),
			CheckpointIndex: s.cur.applied, Owner: l.Owner})
	}
	return &Result{Revision: s.cur.revision, Succeeded: all}
}

// leaseRevokeLocked deletes the named leases and every key attached to them, all at
// one revision. Leases that do not exist are skipped; Succeeded says all existed. The
// one response (OpDeleteRange) counts the keys deleted.
func (s *Store) leaseRevokeLocked(ids []int64) *Result {
	if len(ids) > MaxLeaseBatch {
		return &Result{Revision: s.cur.revision, Err: fmt.Errorf("%w: %d leases in one revoke", ErrInvalidCommand, len(ids))}
	}
	rev := s.cur.revision + 1
	all := true
	var deleted int64
	for _, id := range ids {
		if _, ok := s.cur.ls.get(id); !ok {
			all = false
			continue
		}
		var keys []string
		s.cur.ls.attached.AscendGreaterOrEqual(leaseKey{id: id}, func(lk leaseKey) bool {
			if lk.id != id {
				return false
			}
			keys = append(keys, lk.key)
			return true
		})
		for _, k := range keys {
			s.writeLocked([]byte(k), nil, "", 0, rev, true)
			deleted++
		}
		s.ownLeasesLocked()
		s.cur.ls.leases.Delete(&Lease{ID: id})
		s.cur.ls.noteChange(id)
	}
	if deleted > 0 {
		s.cur.revision = rev
	}
	s.eventsLocked(rev, deleted > 0)
	return &Result{Revision: s.cur.revision, Succeeded: all,
		Responses: []OpResponse{{Type: OpDeleteRange, Deleted: deleted}}}
}

// Lease returns lease id as of the view.
func (v *View) Lease(id int64) (Lease, bool) {
	l, ok := v.st.ls.get(id)
	if !ok {
		return Lease{}, false
	}
	return *l, true
}

// LeaseGen changes whenever the view's leases differ from an earlier view's (a
// grant, a checkpoint, a revoke, a restore): a view with the gen of one already
// looked at holds the same leases.
func (v *View) LeaseGen() uint64 { return v.st.ls.gen }

// LeaseChangesSince returns the IDs of the leases changed (granted, checkpointed,
// revoked) after LeaseGen gen up to the view's, oldest first and possibly repeated,
// when the view still remembers them; ok false means: look at every lease. Read-only.
func (v *View) LeaseChangesSince(gen uint64) (ids []int64, ok bool) {
	ls := &v.st.ls
	if gen < ls.journalBase || gen > ls.gen {
		return nil, false
	}
	return ls.changed[gen-ls.journalBase:], true
}

// RangeLeases calls fn with every lease of the view, by ID, until it returns false.
func (v *View) RangeLeases(fn func(Lease) bool) {
	v.st.ls.leases.Ascend(func(l *Lease) bool { return fn(*l) })
}

// Leases returns every lease of the view, by ID.
func (v *View) Leases() []Lease {
	out := make([]Lease, 0, v.st.ls.leases.Len())
	v.st.ls.leases.Ascend(func(l *Lease) bool {
		out = append(out, *l)
		return true
	})
	return out
}

// LeaseKeys returns the keys attached to lease id, in key order (at most limit of
// them when limit > 0).
func (v *View) LeaseKeys(id int64, limit int) [][]byte {
	var out [][]byte
	v.st.ls.attached.AscendGreaterOrEqual(leaseKey{id: id}, func(lk leaseKey) bool {
		if lk.id != id || (limit > 0 && len(out) == limit) {
			return false
		}
		out = append(out, []byte(lk.key))
		return true
	})
	return out
}

// rebuildAttachments rebuilds the lease → keys index from the live heads of st's tree
// (after a restore); it fails if a key names a lease st does not hold.
func rebuildAttachments(st *state) error {
	var err error
	st.tree.Ascend(func(e *entry) bool {
		if e.hist == nil || e.hist.tombstone() || e.hist.lease == 0 {
			return true
		}
		if _, ok := st.ls.get(e.hist.lease); !ok {
			err = fmt.Errorf("key %q attached to missing lease %d", e.key, e.hist.lease)
			return false
		}
		st.ls.attached.ReplaceOrInsert(leaseKey{id: e.hist.lease, key: string(e.key)})
		return true
	})
	return err
}
