package kv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

// The core's reads, writes, leases and watches (see core.go). Each method checks the
// caller's rights, the limits and the reserved prefixes itself; the door only
// translates its protocol's request into the arguments and the answer back.

// CheckOp validates one operation with the KV API's rules (key length and UTF-8,
// value size, lease ID, range end, ranged-get limit) and returns it as a state machine
// op. Every door translates its ops through it before Txn.
func (s *Server) CheckOp(o api.Op) (fsm.Op, error) { return s.lim.op(o) }

// CheckCompare validates one guard with the KV API's rules. end, when set, makes the
// guard compare every key of [key, end) (fsm.Compare.End): it is bounded like a key,
// and may not overlap the keys keel reserves (reserved.go), which would take part in
// the compare unseen.
func (s *Server) CheckCompare(c api.Compare, end []byte) (fsm.Compare, error) {
	fc, err := s.lim.compare(c)
	if err != nil {
		return fsm.Compare{}, err
	}
	if end == nil {
		if s.reservedKey(fc.Key) {
			return fsm.Compare{}, fmt.Errorf("%w: a compare on a key keel reserves", ErrReservedPrefix)
		}
		return fc, nil
	}
	if len(end) > s.lim.maxKeyBytes {
		return fsm.Compare{}, fmt.Errorf("%w: range_end longer than %d bytes", ErrInvalidKey, s.lim.maxKeyBytes)
	}
	fc.End = end
	if s.checkReservedOp(fsm.Op{Type: fsm.OpDeleteRange, Key: fc.Key, End: fc.End}) != nil {
		return fsm.Compare{}, fmt.Errorf("%w: a compare over a range overlapping keys keel reserves", ErrReservedPrefix)
	}
	return fc, nil
}

// CheckTxnSize refuses (fsm.ErrTooManyOps) a transaction nested depth deep (the outer
// one is 1) beyond fsm.MaxTxnDepth, or with a list longer than fsm.MaxTxnOps.
func (s *Server) CheckTxnSize(depth, compares, success, failure int) error {
	if depth > fsm.MaxTxnDepth {
		return fmt.Errorf("%w: transactions nested more than %d deep", fsm.ErrTooManyOps, fsm.MaxTxnDepth)
	}
	if name, n := overlongTxnList(compares, success, failure); name != "" {
		return fmt.Errorf("%w: %d %s entries, more than the maximum %d", fsm.ErrTooManyOps, n, name, fsm.MaxTxnOps)
	}
	return nil
}

// TxnOptions are the rules a door asks of Txn beyond keel's own.
type TxnOptions struct {
	// EtcdDuplicates checks duplicate keys by etcd's rule, quirks included
	// (fsm.CheckDuplicateKeysEtcd: a put inside a range another op of the same branch
	// deletes is refused, a delete from a key to the keyspace's end beside a put is
	// not) instead of keel's stricter one (fsm.CheckDuplicateKeys).
	EtcdDuplicates bool
	// DuplicateView is the transaction as etcd's rule must see it, when the door's
	// translation changed its shape (etcd's "\x00" range end); the transaction itself
	// when nil.
	DuplicateView *fsm.Txn
	// DeleteAroundReserved is asked by a door that hides keel's reserved keys (its
	// records, typed resources' keys) from reads and watches, the etcd door: a delete
	// range overlapping them deletes the keys around them, as one revision
	// (carveReserved: `etcdctl del "" --from-key` wipes every key the caller may
	// write), where a door that shows them refuses it (ErrReservedPrefix, naming the
	// prefix and the API that writes it).
	DeleteAroundReserved bool
}

// Txn applies a transaction whose ops and compares the door validated (CheckOp,
// CheckCompare, CheckTxnSize): the caller's rights on every key it touches, the
// reserved prefixes and the duplicate-key rules are checked here, on the node that
// takes it and again on the leader a follower forwards it to.
func (s *Server) Txn(ctx context.Context, c Caller, txn *fsm.Txn, opts TxnOptions) (*fsm.Result, error) {
	return s.applyTxn(c.context(ctx), txn, opts)
}

// checkDuplicates is the one choice of the duplicate-key rule every transaction is
// checked with before it is proposed (fsm.ErrDuplicateKey): keel's by default, etcd's
// on DuplicateView (txn when nil) with EtcdDuplicates.
func (o TxnOptions) checkDuplicates(txn *fsm.Txn) error {
	if !o.EtcdDuplicates {
		return fsm.CheckDuplicateKeys(txn)
	}
	if o.DuplicateView != nil {
		txn = o.DuplicateView
	}
	return fsm.CheckDuplicateKeysEtcd(txn)
}

// RangeRequest reads one key (End nil) or the keys of [Key, End).
type RangeRequest struct {
	Key, End     []byte
	Revision     int64 // 0: the latest
	Serializable bool  // the local state, without a round trip to the leader
	// Limit > 0 on a ranged read: at most Limit keys, in key order, with Count the
	// live keys of the whole range and More set when it holds more (Counted). The
	// store counts from its tree's ranks (fsm.View.Count), so the read costs
	// O(Limit + log n) however long the range: a paged list's every page included. A
	// range that overlaps keys a door hides (Hidden) ignores it and returns every key,
	// since its count must leave them out.
	Limit int64
	// NoCount, with Limit, reads the page alone: Count is 0 and More still says
	// whether the range holds more (a streamed range's middle pages, whose count
	// nobody reads).
	NoCount bool
	// CountOnly on a ranged read returns no keys, only Count (Counted), in O(log n),
	// under the same condition as Limit: a range that overlaps hidden keys ignores it.
	CountOnly bool
}

// RangeResult is what a range read: its keys in key order, and the revision of the
// state it read them from (the store's revision then, not the read's).
type RangeResult struct {
	KVs      []fsm.KeyValue
	Revision int64
	// Counted says RangeRequest.Limit was applied: Count and More describe the range.
	Counted bool
	Count   int64
	More    bool
}

// Range reads r for c: the range is validated as a ranged get (CheckOp) and c needs
// the read right on all of it.
func (s *Server) Range(ctx context.Context, c Caller, r RangeRequest) (RangeResult, error) {
	op, err := s.lim.op(api.Op{Type: api.OpGet, Key: string(r.Key), End: string(r.End)})
	if err != nil {
		return RangeResult{}, err
	}
	if err := checkTxnAccess(c.az, &fsm.Txn{Success: []fsm.Op{op}}); err != nil {
		return RangeResult{}, err
	}
	cons := fsm.Linearizable
	if r.Serializable {
		cons = fsm.Serializable
	}
	view, err := s.viewAt(ctx, cons, r.Revision)
	if err != nil {
		return RangeResult{}, err
	}
	rev := r.Revision
	if rev <= 0 {
		rev = view.Revision()
	}
	res := RangeResult{Revision: view.Revision()}
	if op.End != nil && (r.Limit > 0 || r.CountOnly) &&
		s.checkReservedOp(fsm.Op{Type: fsm.OpDeleteRange, Key: op.Key, End: op.End}) == nil {
		page, err := view.RangeWith(op.Key, op.End, r.Limit,
			fsm.RangeOptions{Revision: rev, WithCount: !r.NoCount, CountOnly: r.CountOnly})
		if err != nil {
			return RangeResult{}, revisionError(view, rev, err)
		}
		res.KVs, res.Count, res.More, res.Counted = page.KVs, page.Count, page.More, true
		return res, nil
	}
	if op.End != nil {
		if res.KVs, _, err = view.Range(op.Key, op.End, rev, 0); err != nil {
			return RangeResult{}, revisionError(view, rev, err)
		}
		return res, nil
	}
	kv, err := view.Get(op.Key, rev)
	if err == nil {
		res.KVs = []fsm.KeyValue{kv}
	} else if !errors.Is(err, fsm.ErrKeyNotFound) {
		return RangeResult{}, revisionError(view, rev, err)
	}
	return res, nil
}

// CheckCompact is nil when c may compact (the compact right): Compact checks it
// first, and a door asks it before reading the request.
func (s *Server) CheckCompact(c Caller) error { return checkRight(c.az, api.RightCompact) }

// Compact compacts history up to rev, for a caller with the compact right.
func (s *Server) Compact(ctx context.Context, c Caller, rev int64) (*fsm.Result, error) {
	if err := s.CheckCompact(c); err != nil {
		return nil, err
	}
	return s.compact(ctx, rev)
}

// Members returns the node's Raft state (its members) and a linearizable view to read
// their records from, for a caller with the members right.
func (s *Server) Members(ctx context.Context, c Caller) (raft.Status, *fsm.View, error) {
	if err := checkRight(c.az, api.RightMembers); err != nil {
		return raft.Status{}, nil, err
	}
	v, err := s.viewAt(ctx, fsm.Linearizable, 0)
	if err != nil {
		return raft.Status{}, nil, err
	}
	return s.store.Status(), v, nil
}

// MembersOfAny is Members for any authenticated caller, with no right: etcd serves
// MemberList to every client (clientv3's endpoint sync and etcdctl's --cluster read
// it, as any user), so the etcd door does. The caller was authenticated (a token when
// ACLs are enforced): keel lists its members to no anonymous caller.
func (s *Server) MembersOfAny(ctx context.Context, c Caller) (raft.Status, *fsm.View, error) {
	return s.Members(ctx, Caller{})
}

// StateView returns a view of the node's whole state (serializable), for a caller
// with the snapshot right: what a snapshot or a hash
// of the state reads.
func (s *Server) StateView(ctx context.Context, c Caller) (*fsm.View, error) {
	if err := checkRight(c.az, api.RightSnapshot); err != nil {
		return nil, err
	}
	return s.store.View(ctx, fsm.Serializable)
}

// LeaseGrant grants lease id (0: a new random ID) for ttl seconds and returns its ID.
// TTLs outside [api.MinLeaseTTL, api.MaxLeaseTTL] are refused; c needs a write right
// on some key prefix, and the per-token lease bound applies. Under ACLs the lease is
// c's policies' from then on (core_lease.go): only they and a management token use it.
func (s *Server) LeaseGrant(ctx context.Context, c Caller, id, ttl int64) (int64, error) {
	return s.grantLease(c.context(ctx), id, ttl)
}

// LeaseRevoke revokes lease id and deletes its keys at one revision; c must be its
// owner (core_lease.go) and need the write right on each of its keys.
func (s *Server) LeaseRevoke(ctx context.Context, c Caller, id int64) (api.LeaseRevokeResponse, error) {
	if err := s.CheckLeases(c); err != nil {
		return api.LeaseRevokeResponse{}, err
	}
	if err := checkLeaseID(id); err != nil {
		return api.LeaseRevokeResponse{}, err
	}
	return s.revokeLease(c.context(ctx), id)
}

// LeaseKeepAlive renews lease id at the leader and returns the time it has left
// (fsm.ErrLeaseNotFound when it does not exist); c must be its owner (core_lease.go).
func (s *Server) LeaseKeepAlive(ctx context.Context, c Caller, id int64) (time.Duration, error) {
	if err := s.CheckLeases(c); err != nil {
		return 0, err
	}
	if err := checkLeaseID(id); err != nil {
		return 0, err
	}
	return s.keepAliveLease(c.context(ctx), id)
}

// LeaseTimeToLive returns lease id with its keys and time left, to its owner
// (core_lease.go) if it may read every key attached (fsm.ErrLeaseNotFound when it
// does not exist).
func (s *Server) LeaseTimeToLive(ctx context.Context, c Caller, id int64) (api.LeaseResponse, error) {
	if err := s.CheckLeases(c); err != nil {
		return api.LeaseResponse{}, err
	}
	if err := checkLeaseID(id); err != nil {
		return api.LeaseResponse{}, err
	}
	return s.leaseTimeToLive(c.context(ctx), id)
}

// ErrInvalidLeaseID is a lease ID below 1, which no lease can have: refused before any
// round trip, on every door (HTTP and the stream answer 400; etcd's door, as etcd,
// "requested lease not found"). Any positive int64 is a lease ID, as in etcd: keel
// chooses its own below 2^53 (api.MaxLeaseID), but a grant may name a larger one, and
// leases imported from etcd keep theirs.
var ErrInvalidLeaseID = fmt.Errorf("%w: lease ID below 1", ErrInvalidParam)

// checkLeaseID refuses an ID no lease can have.
func checkLeaseID(id int64) error {
	if id < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidLeaseID, id)
	}
	return nil
}

// checkLeaseRef refuses a lease a key or a grant names (0: none, or a new random ID)
// that no lease can have.
func checkLeaseRef(id int64) error {
	if id == 0 {
		return nil
	}
	return checkLeaseID(id)
}

// Leases lists the leases c may use: under ACLs, those it owns (core_lease.go).
func (s *Server) Leases(ctx context.Context, c Caller, cons fsm.Consistency) (api.LeaseListResponse, error) {
	return s.listLeases(c.context(ctx), cons)
}

// compact compacts history up to rev (Compact, for every door); the caller has
// checked the compact right.
func (s *Server) compact(ctx context.Context, rev int64) (*fsm.Result, error) {
	if rev < 1 {
		return nil, fmt.Errorf("compact: %w: revision %d must be >= 1", ErrInvalidBody, rev)
	}
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdCompact, Revision: rev})
	if err != nil {
		return nil, fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	return res, nil
}
