// Package rightstest holds the tables every door of kv is tested against, each case
// described without a door (Op); each door's test package (HTTP in kv's, the stream
// protocol in kv/stream's, the etcd API in kv/etcdv3's) translates them into its own
// requests (Door.Do) and runs them against one Fixture.
//
// The rights table (this file): every client operation keel serves, the right it
// needs, and the answer a token lacking that right gets (RunRightCases,
// RunUnauthorizedCases). The rules table (rules.go): the core's other rules, each
// broken once (RunRuleCases). A door that adds an operation adds a case here, and
// every door must then refuse it — or say in its runner that it does not serve it
// (NotServed).
//
// It is test support only: no production code imports it.
package rightstest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// Right is the right an operation needs.
type Right string

const (
	NeedRead  Right = "read on the key"
	NeedWrite Right = "write on the key"
	NeedLease Right = "write on some key prefix (leases)"
	// NeedLeaseOwner is the right on one lease: holding every policy of the token
	// that granted it (lease_owner.go), or the management right. The fixture's lease
	// is the management token's; the token lacking the right writes other/ alone.
	NeedLeaseOwner Right = "owner of the lease"
	// NeedReadAll is the read right on every key of a range; the token lacking it may
	// read Key but not Beside (see PartialRead for the answer it gets).
	NeedReadAll  Right = "read on every key of the range"
	NeedCompact  Right = "the operator right " + api.RightCompact
	NeedMembers  Right = "the operator right " + api.RightMembers
	NeedSnapshot Right = "the operator right " + api.RightSnapshot
	NeedPeers    Right = "the operator right " + api.RightPeers
	NeedLeader   Right = "the operator right " + api.RightLeadership
)

// Kind is a client operation, whatever door carries it.
type Kind uint8

const (
	Get             Kind = iota + 1
	Range                // read every key with the prefix Key (stream: a txn's ranged get; HTTP: a list)
	Put                  // put Key; with Lease, attached to the fixture's lease
	Delete               // delete Key
	DeleteRange          // delete every key with the prefix Key
	Watch                // watch Key, or the prefix Key with Prefix
	Txn                  // run Txn
	LeaseGrant           // grant a new lease
	LeaseKeepAlive       // renew the fixture's lease
	LeaseRevoke          // revoke the fixture's lease
	LeaseTimeToLive      // look up the fixture's lease
	LeaseList            // list the leases
	Compact              // compact history up to Revision
	MemberList           // list the members
	MemberRemove         // remove the member NoMember, which is none
	HashKV               // hash the state (etcd's Maintenance.HashKV)
	Snapshot             // save a snapshot (etcd's Maintenance.Snapshot)
	Defragment           // defragment the store (etcd's Maintenance.Defragment): compaction's right
	MoveLeader           // hand leadership to the member NoMember, which is none
)

// Op is one operation, described independently of the door.
type Op struct {
	Kind         Kind
	Key          string
	Serializable bool  // get
	Revision     int64 // get: 0 = latest; compact: the revision
	Prefix       bool  // watch
	Lease        bool  // put: attach to the fixture's lease
	// LeaseID is the lease a put with Lease and the lease operations name; 0: the
	// fixture's (Fixture.LeaseOf).
	LeaseID int64
	Value   []byte // put: nil = "v"
	Txn     api.TxnRequest
	Limit   int64 // range: at most this many keys (0: no limit)
	HasPrev bool  // delete: guarded on the key's mod revision being Prev
	Prev    int64 // delete: with HasPrev
	// Body is a txn's request as the KV API's JSON body, sent as is instead of Txn (a
	// door that carries no JSON body, etcd's, does not serve it).
	Body []byte
}

// Case is one row of the table: Op needs Right.
type Case struct {
	Name  string
	Right Right
	Op    Op
}

// Key is the key the cases touch; Other is a prefix every lacking token may write, so
// that a token lacking one right holds all the others it can. Beside is a second key
// under Key's prefix "app/" that the token lacking NeedReadAll may not read.
// NoMember is the node a member removal names: no member has it, so that with every
// right the removal is refused as not found, and the fixture keeps its one node.
const (
	Key      = "app/x"
	Beside   = "app/y"
	Other    = "other/"
	NoMember = 0x6b65656c
)

// Cases is the table.
var Cases = []Case{
	{"get", NeedRead, Op{Kind: Get, Key: Key}},
	{"get serializable", NeedRead, Op{Kind: Get, Key: Key, Serializable: true}},
	{"get at a revision", NeedRead, Op{Kind: Get, Key: Key, Revision: 1}},
	{"range", NeedRead, Op{Kind: Range, Key: "app/"}},
	{"put", NeedWrite, Op{Kind: Put, Key: Key}},
	{"put with lease", NeedWrite, Op{Kind: Put, Key: Key, Lease: true}},
	{"delete", NeedWrite, Op{Kind: Delete, Key: Key}},
	{"delete range", NeedWrite, Op{Kind: DeleteRange, Key: "app/"}},
	{"watch key", NeedRead, Op{Kind: Watch, Key: Key}},
	{"watch prefix", NeedRead, Op{Kind: Watch, Key: "app/", Prefix: true}},
	{"txn compare", NeedRead, Op{Kind: Txn, Txn: api.TxnRequest{
		Compare: []api.Compare{{Key: Key, Target: api.TargetVersion, Result: api.ResultGreater, Int: 0}},
		Success: []api.Op{{Type: api.OpPut, Key: Other + "t", Value: []byte("v")}}}}},
	{"txn get", NeedRead, Op{Kind: Txn, Txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpGet, Key: Key}}}}},
	{"txn ranged get", NeedRead, Op{Kind: Txn, Txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpGet, Key: "app/", Prefix: true}}}}},
	{"txn put", NeedWrite, Op{Kind: Txn, Txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpPut, Key: Key, Value: []byte("v")}}}}},
	{"txn delete in the failure branch", NeedWrite, Op{Kind: Txn, Txn: api.TxnRequest{
		Compare: []api.Compare{{Key: Other + "t", Target: api.TargetVersion, Result: api.ResultEqual, Int: 0}},
		Failure: []api.Op{{Type: api.OpDelete, Key: Key}}}}},
	{"txn delete range", NeedWrite, Op{Kind: Txn, Txn: api.TxnRequest{
		Success: []api.Op{{Type: api.OpDeleteRange, Key: "app/", Prefix: true}}}}},
	{"lease grant", NeedLease, Op{Kind: LeaseGrant}},
	{"lease keepalive", NeedLease, Op{Kind: LeaseKeepAlive}},
	{"lease revoke", NeedLease, Op{Kind: LeaseRevoke}},
	{"lease time to live", NeedLease, Op{Kind: LeaseTimeToLive}},
	{"lease keepalive by another tenant", NeedLeaseOwner, Op{Kind: LeaseKeepAlive}},
	{"lease revoke by another tenant", NeedLeaseOwner, Op{Kind: LeaseRevoke}},
	{"lease time to live by another tenant", NeedLeaseOwner, Op{Kind: LeaseTimeToLive}},
	{"put with another tenant's lease", NeedLeaseOwner, Op{Kind: Put, Key: Other + "k", Lease: true}},
	{"lease list", NeedLease, Op{Kind: LeaseList}},
	{"range read in part", NeedReadAll, Op{Kind: Range, Key: "app/"}},
	{"compact", NeedCompact, Op{Kind: Compact, Revision: 1}},
	{"member list", NeedMembers, Op{Kind: MemberList}},
	{"member remove", NeedPeers, Op{Kind: MemberRemove}},
	{"hash kv", NeedSnapshot, Op{Kind: HashKV}},
	{"snapshot", NeedSnapshot, Op{Kind: Snapshot}},
	{"defragment", NeedCompact, Op{Kind: Defragment}},
	{"move leader", NeedLeader, Op{Kind: MoveLeader}},
}

// PartialRead is the one rule for a read of a range the token may read only part of
// (the case without NeedReadAll: Key readable, Beside not), as the core answers it:
// its Range (a ranged get, in a transaction or etcd's Range) refuses it whole, 403
// naming the right, as any range the token may not read all of (checkTxnAccess); its
// List (HTTP's list) and its watches filter it to the keys the token may read
// (listRights, readFilter: 403 only when it may read none). Either way no key the
// token may not read is answered. nil when a answers so: refused, or not refused
// with exactly the readable keys (a door that reports no keys cannot pass as
// filtering).
func PartialRead(a Answer) error {
	if refused(a) || a.Code == 0 && slices.Equal(a.Keys, []string{Key}) {
		return nil
	}
	return fmt.Errorf("%d %s %q keys %q; want 403 Forbidden naming the right, or the keys [%s] alone",
		a.Code, a.Reason, a.Msg, a.Keys, Key)
}

// refused reports whether a is 403 Forbidden naming the right (or in the door's fixed
// words).
func refused(a Answer) bool {
	return a.Code == http.StatusForbidden && a.Reason == api.ReasonForbidden && (a.Fixed || strings.Contains(a.Msg, "right"))
}

// Answer is how a door answered an operation, in HTTP's terms (each door maps its
// protocol's refusals to them): the status code, the api.Reason and the message, or
// Code 0 when the operation was not refused. Fixed says the protocol's message is its
// own fixed text (etcd's "etcdserver: permission denied"), which cannot name the right.
// Keys are the keys a range read answered, in order. NotServed says the door does
// not carry the operation at all (the answer NotServed): the tables skip it there.
type Answer struct {
	Code        int
	Reason, Msg string
	Fixed       bool
	Keys        []string
	NotServed   bool
	// Leases are the IDs a lease list answered, in order.
	Leases []int64
}

// NotServed is a door's answer to an operation it does not carry: etcd's HashKV
// over HTTP, a compaction over the stream protocol. A door says so in its runner,
// operation by operation, so that a new Kind it forgets fails there (t.Fatalf).
var NotServed = Answer{NotServed: true}

// Door carries the table's operations. secret "" sends no token.
type Door interface {
	Do(t *testing.T, secret string, op Op) Answer
}

// Policies are, for each right, a policy without it.
var Policies = map[Right]api.ACLPolicy{
	// write (so read) on other/ only, every operator right: app/ unreadable.
	NeedRead: {Name: "no-read", Keys: []api.ACLKeyRule{{Prefix: Other, Access: api.AccessWrite}},
		Operator: []string{api.RightAll}},
	// read everything, write other/: app/ not writable, leases allowed.
	NeedWrite: {Name: "no-write", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead},
		{Prefix: Other, Access: api.AccessWrite}}, Operator: []string{api.RightAll}},
	// read everything, write no key: no leases.
	NeedLease: {Name: "no-lease", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}},
		Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessWrite}},
		Operator:  []string{api.RightAll}},
	// read app/x (Key) alone of app/, write other/: a range of app/ is read in part.
	NeedReadAll: {Name: "read-part", Keys: []api.ACLKeyRule{{Prefix: Key, Access: api.AccessRead},
		{Prefix: Other, Access: api.AccessWrite}}, Operator: []string{api.RightAll}},
	// write other/ alone: leases allowed, the fixture's lease (the management
	// token's, no key attached) not its own.
	NeedLeaseOwner: {Name: "not-lease-owner", Keys: []api.ACLKeyRule{{Prefix: Other, Access: api.AccessWrite}}},
	NeedCompact:    lacksOperator("no-compact", api.RightCompact),
	NeedMembers:    lacksOperator("no-members", api.RightMembers),
	NeedSnapshot:   lacksOperator("no-snapshot", api.RightSnapshot),
	NeedPeers:      lacksOperator("no-peers", api.RightPeers),
	NeedLeader:     lacksOperator("no-leadership", api.RightLeadership),
}

// lacksOperator is a policy with every key and resource right and every operator
// right but right.
func lacksOperator(name, right string) api.ACLPolicy {
	return api.ACLPolicy{Name: name, Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessWrite}},
		Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessWrite}},
		Operator:  slices.DeleteFunc(slices.Clone(api.OperatorRights), func(r string) bool { return r == right })}
}

// RunRightCases runs every case d serves through it: with the token that lacks its
// right it is 403 Forbidden naming the right (a partial read: PartialRead) and
// changes nothing; with every right it is not refused (whatever else it answers).
func RunRightCases(t *testing.T, f *Fixture, d Door) {
	t.Helper()
	before := f.Store.FSM().Revision()
	for _, c := range Cases {
		a := d.Do(t, f.Lacking[c.Right], c.Op)
		switch {
		case a.NotServed:
		case c.Right == NeedReadAll:
			if err := PartialRead(a); err != nil {
				t.Errorf("%s without %s: %v", c.Name, c.Right, err)
			}
		case !refused(a):
			t.Errorf("%s without %s: %d %s %q; want 403 Forbidden naming the right", c.Name, c.Right, a.Code, a.Reason, a.Msg)
		}
	}
	if after := f.Store.FSM().Revision(); after != before {
		t.Errorf("refused operations moved the revision %d → %d", before, after)
	}
	if v := f.Store.FSM().View(); v.CompactRevision() != 0 {
		t.Errorf("refused operations compacted history to %d", v.CompactRevision())
	}
	if _, ok := f.Store.FSM().View().Lease(f.Lease); !ok {
		t.Errorf("lease %d is gone after refused operations", f.Lease)
	}
	for _, c := range Cases {
		if a := d.Do(t, f.Mgmt, c.Op); a.Code == http.StatusForbidden || a.Code == http.StatusUnauthorized {
			t.Errorf("%s with every right: %d %s %q; want it not refused", c.Name, a.Code, a.Reason, a.Msg)
		}
	}
}

// RunUnauthorizedCases runs every case through d with secret, a token that is not
// (or no longer) valid: each is 401 and changes nothing.
func RunUnauthorizedCases(t *testing.T, f *Fixture, d Door, secret, what string) {
	t.Helper()
	before := f.Store.FSM().Revision()
	for _, c := range Cases {
		if a := d.Do(t, secret, c.Op); !a.NotServed && (a.Code != http.StatusUnauthorized || a.Reason != api.ReasonUnauthorized) {
			t.Errorf("%s with %s: %d %s %q; want 401 Unauthorized", c.Name, what, a.Code, a.Reason, a.Msg)
		}
	}
	if after := f.Store.FSM().Revision(); after != before {
		t.Errorf("unauthorized operations moved the revision %d → %d", before, after)
	}
}

// PutValue is the value a put of op writes.
func (o Op) PutValue() []byte {
	if o.Value == nil {
		return []byte("v")
	}
	return o.Value
}
