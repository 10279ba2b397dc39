package fsm

import "errors"

// Sentinel errors of the state machine. Match them with errors.Is.
var (
	// ErrCompacted: the requested revision is older than the compact revision.
	ErrCompacted = errors.New("fsm: revision compacted")
	// ErrFutureRevision: the requested revision is newer than the current revision.
	ErrFutureRevision = errors.New("fsm: revision is in the future")
	// ErrKeyNotFound: no live key at the requested revision; or a put with IgnoreValue
	// or IgnoreLease names a key that does not exist (nothing was written).
	ErrKeyNotFound = errors.New("fsm: key not found")
	// ErrTooManyOps: a transaction holds more than MaxTxnOps operations.
	ErrTooManyOps = errors.New("fsm: too many operations in transaction")
	// ErrDuplicateKey: one branch of a transaction writes a key twice (see
	// CheckDuplicateKeys).
	ErrDuplicateKey = errors.New("fsm: duplicate key given in transaction")
	// ErrInvalidCommand: a command is malformed (empty key, bad op, range end <= start ...).
	ErrInvalidCommand = errors.New("fsm: invalid command")
	// ErrUnknownFormat: bytes carry a format version this build cannot decode.
	ErrUnknownFormat = errors.New("fsm: unknown format version")
	// ErrCorrupt: bytes (command, result or snapshot) cannot be decoded.
	ErrCorrupt = errors.New("fsm: corrupt data")
	// ErrNotSnapshot: the bytes do not start as a keel snapshot (another file).
	ErrNotSnapshot = errors.New("fsm: not a keel snapshot")
	// ErrSlowWatcher: a watcher's queue reached its bound; the watch ended (WatchError).
	ErrSlowWatcher = errors.New("fsm: watcher too slow, its buffer is full")
	// ErrStaleSnapshot: RestoreAt was given a snapshot older than the state, which it
	// leaves as it is.
	ErrStaleSnapshot = errors.New("fsm: snapshot older than the applied state")
	// ErrWatchRestored: the store was restored from a snapshot; the watch ended.
	ErrWatchRestored = errors.New("fsm: store restored from a snapshot")
	// ErrWatchClosed: Next was called on a closed watcher.
	ErrWatchClosed = errors.New("fsm: watcher closed")
	// ErrLeaseNotFound: a put or a keepalive names a lease that does not exist (never
	// granted, revoked or expired); nothing was written.
	ErrLeaseNotFound = errors.New("fsm: lease not found")
	// ErrLeaseExists: a grant names a lease ID already in use; nothing was written.
	ErrLeaseExists = errors.New("fsm: lease already exists")
)

// MaxTxnOps bounds compares + success ops + failure ops of one transaction... each list
// separately: at most MaxTxnOps compares, MaxTxnOps success ops, MaxTxnOps failure ops.
// Nested transactions (OpTxn) share the budget as in etcd (v3rpc checkTxnRequest): a
// transaction whose longest list has n entries leaves its nested ones MaxTxnOps - n,
// each; so nesting is at most MaxTxnDepth deep.
const MaxTxnOps = 128

// MaxTxnDepth bounds the nesting of transactions: the outer one is depth 1. The budget
// rule above already implies it; decoders refuse deeper nesting before recursing.
const MaxTxnDepth = MaxTxnOps + 1

// KeyValue is one version of a key as seen at some revision.
//
// Values returned by a View alias memory shared with the store and with other views:
// callers must treat Key and Value as read-only.
type KeyValue struct {
	Key            []byte
	Value          []byte
	CreateRevision int64 // revision of the write that created this generation of the key
	ModRevision    int64 // revision of the last write to the key
	Version        int64 // writes to the key since creation (1 after create); 0 = absent
	// Encoding is the tag the writer gave the value (Op.Encoding), "" when untagged.
	Encoding string
	// Lease is the lease the key is attached to (Op.Lease), 0 for none. Results
	// forwarded from another node carry it when encoded by EncodeResultWithLeases.
	Lease int64
}

// OpType is the kind of one operation inside a transaction.
type OpType uint8

const (
	OpPut         OpType = 1 // put Key = Value
	OpDelete      OpType = 2 // delete Key
	OpDeleteRange OpType = 3 // delete every key in [Key, End)
	OpGet         OpType = 4 // read Key, or [Key, End) when End is set, at the txn's read revision
	// OpTxn runs Op.Txn, a nested transaction (etcd's RequestOp_RequestTxn): its
	// compares are evaluated with the outer ones, before anything is written, and its
	// writes share the outer transaction's revision. It needs CommandFormatV4.
	OpTxn OpType = 5
)

// Op is one operation of a transaction.
type Op struct {
	Type  OpType
	Key   []byte
	End   []byte // range end (exclusive) for OpDeleteRange and ranged OpGet; see PrefixEnd
	Value []byte // OpPut only
	Limit int64  // ranged OpGet only: at most Limit items, 0 = unlimited
	// Encoding tags the value of an OpPut with the storage encoding it is written in
	// (for resources, "group/resource/version"); "" leaves it untagged. The store counts
	// live keys per tag (View.Encodings), so the set of encodings in use is known exactly
	// at every revision. A tagged command needs CommandFormatV2.
	Encoding string
	// Lease attaches the key of an OpPut to a lease (see lease.go); 0 attaches it to
	// none, so a put without a lease detaches the key. The whole transaction fails
	// with ErrLeaseNotFound, writing nothing, if the lease does not exist. A command
	// with a lease needs CommandFormatV3.
	Lease int64

	// The fields below need CommandFormatV4 (etcd's KV API; see doc.go).

	// PrevKV (OpDelete, OpDeleteRange) returns the previous version of every key the op
	// deletes in OpResponse.PrevKVs (etcd DeleteRangeRequest.prev_kv).
	PrevKV bool
	// IgnoreValue (OpPut) writes the key's current value (and encoding tag) instead of
	// Value, which must be empty; IgnoreLease keeps the key's current lease instead of
	// Lease, which must be 0 (etcd PutRequest.ignore_value, ignore_lease). If the key
	// does not exist before the transaction, the whole transaction fails with
	// ErrKeyNotFound and writes nothing (etcd "etcdserver: key not found").
	IgnoreValue bool
	IgnoreLease bool
	// Range holds etcd's RangeRequest options of an OpGet (see RangeOptions).
	Range RangeOptions
	// Txn is the nested transaction of an OpTxn.
	Txn *Txn
}

// RangeOptions are the options of etcd's RangeRequest beyond key, range end and limit,
// for View.RangeWith and for an OpGet inside a transaction (Op.Range). The zero value
// reads the latest revision in key order, values included, without counting.
// Semantics are etcd's (server/etcdserver/txn/range.go executeRange): revision filters
// and a sort other than ascending keys apply to every key of the range before the limit
// cuts it; More says the limit cut something; Count counts every key of the range at
// the revision, ignoring limit and filters.
type RangeOptions struct {
	// Revision reads at that revision; 0 = the latest (inside a transaction: the state
	// as the transaction's earlier ops left it). Inside a transaction a revision outside
	// the readable window fails the whole transaction (ErrFutureRevision, ErrCompacted)
	// before anything is written; as in etcd (txn.checkRange, whose compacted bound is
	// -1 until the first compaction), -1 reads the latest revision until the store is
	// first compacted and every other negative revision is ErrCompacted. View.RangeWith
	// reads the latest revision for every revision <= 0, as etcd's Range does.
	Revision   int64
	SortOrder  SortOrder
	SortTarget SortTarget
	// KeysOnly returns no values. As in etcd 3.7 (mvcc rangeKeys, FastKeysOnly), unless
	// SortTarget is SortByValue the keys come from the index, so their Lease is 0 too.
	KeysOnly bool
	// CountOnly returns only the count (every key of the range, limit and filters
	// ignored): no KVs, More false.
	CountOnly bool
	// WithCount sets OpResponse.Count / RangeResult.Count to the number of keys in the
	// range at the revision, ignoring limit and filters (etcd RangeResponse.count; etcd
	// always counts). The store counts from its tree's ranks, without visiting the
	// range (O(log n), plus the keys written since an older revision; count.go).
	WithCount bool
	// Revision filters (0 = none): keep keys with ModRevision in [MinModRevision,
	// MaxModRevision] and CreateRevision in [MinCreateRevision, MaxCreateRevision].
	MinModRevision    int64
	MaxModRevision    int64
	MinCreateRevision int64
	MaxCreateRevision int64
}

// SortOrder is etcd's RangeRequest.SortOrder; values are etcd's.
type SortOrder uint8

const (
	SortNone    SortOrder = 0 // key order; with a SortTarget other than SortByKey, ascending
	SortAscend  SortOrder = 1
	SortDescend SortOrder = 2
)

// SortTarget is etcd's RangeRequest.SortTarget; values are etcd's.
type SortTarget uint8

const (
	SortByKey     SortTarget = 0
	SortByVersion SortTarget = 1
	SortByCreate  SortTarget = 2
	SortByMod     SortTarget = 3
	SortByValue   SortTarget = 4
)

// MaxEncodingLen bounds Op.Encoding.
const MaxEncodingLen = 255

// CompareTarget names what a Compare looks at.
type CompareTarget uint8

const (
	TargetValue          CompareTarget = 1 // compares Compare.Value with the key's value bytes
	TargetVersion        CompareTarget = 2 // compares Compare.Int; absent key has version 0
	TargetModRevision    CompareTarget = 3 // compares Compare.Int; absent key has mod revision 0
	TargetCreateRevision CompareTarget = 4 // compares Compare.Int; absent key has create revision 0
	TargetExists         CompareTarget = 5 // Int 1 = key exists, 0 = absent; only CompareEqual/NotEqual
	// TargetLease compares Compare.Int with the key's lease ID (etcd Compare.LEASE);
	// absent key has lease 0. It needs CommandFormatV4.
	TargetLease CompareTarget = 6
)

// CompareResult is the relation a Compare asserts between the key's field and the operand.
type CompareResult uint8

const (
	CompareEqual    CompareResult = 1
	CompareNotEqual CompareResult = 2
	CompareLess     CompareResult = 3 // field < operand
	CompareGreater  CompareResult = 4 // field > operand
)

// Compare is one guard of a transaction, evaluated against the latest revision, before
// the transaction writes anything.
//
// With End set (etcd Compare.range_end; CommandFormatV4) it compares every key of
// [Key, End) — an empty non-nil End means every key >= Key — and holds only if it holds
// for each key. A range without keys compares as one absent key (version, revisions and
// lease 0, not existing), except that a TargetValue compare then fails whatever the
// relation, as etcd's applyCompare does. An End at or before Key is an empty range.
type Compare struct {
	Key    []byte
	End    []byte
	Target CompareTarget
	Result CompareResult
	Value  []byte // TargetValue
	Int    int64  // every other target
}

// Txn is an atomic, guarded list of operations: if every Compare holds, Success runs,
// otherwise Failure runs. All writes of one Txn share one revision; a Txn that writes
// nothing (only gets, or deletes of absent keys) does not advance the revision.
type Txn struct {
	Compares []Compare
	Success  []Op
	Failure  []Op
}

// CommandType is the kind of a replicated command.
type CommandType uint8

const (
	CmdTxn         CommandType = 1 // run Command.Txn
	CmdCompact     CommandType = 2 // compact history up to Command.Revision (inclusive)
	CmdClusterMeta CommandType = 3 // set cluster ID and secret once; later ones are no-ops
	// Lease commands (CommandFormatV3, a grant with an owner CommandFormatV5; see
	// lease.go).
	CmdLeaseGrant      CommandType = 4 // create lease Command.LeaseID with Command.LeaseTTL
	CmdLeaseRevoke     CommandType = 5 // delete leases Command.LeaseIDs and their keys at one revision
	CmdLeaseCheckpoint CommandType = 6 // set Remaining of leases (Command.Checkpoints)
)

// Command is what a client asks the replicated state machine to do. It is encoded with
// EncodeCommand into a Raft log entry and decoded with DecodeCommand on every replica.
type Command struct {
	Type      CommandType
	Txn       *Txn
	Revision  int64 // CmdCompact
	ClusterID string
	Secret    []byte // CmdClusterMeta: the secret that authenticates continue tokens

	LeaseID     int64             // CmdLeaseGrant
	LeaseTTL    int64             // CmdLeaseGrant, milliseconds
	LeaseOwner  string            // CmdLeaseGrant: Lease.Owner ("" none; else CommandFormatV5)
	LeaseIDs    []int64           // CmdLeaseRevoke
	Checkpoints []LeaseCheckpoint // CmdLeaseCheckpoint
}

// OpResponse is the outcome of one executed Op, in the order the ops ran.
type OpResponse struct {
	Type    OpType
	Deleted int64      // OpDelete, OpDeleteRange: keys deleted
	PrevKV  *KeyValue  // OpPut, OpDelete: the previous version of the key, if it existed
	KVs     []KeyValue // OpGet
	More    bool       // ranged OpGet: Limit cut the result
	// PrevKVs (OpDelete, OpDeleteRange with Op.PrevKV): the previous version of every
	// key deleted, in key order; nil when none was.
	PrevKVs []KeyValue
	// Count (OpGet with Range.WithCount or Range.CountOnly): keys in the range.
	Count int64
	// Txn (OpTxn): the nested transaction's outcome, Succeeded and Responses only
	// (Revision 0, as etcd leaves a nested TxnResponse's header revision).
	Txn *Result
}

// Result is the state machine's answer to one command. A failed guard or a bad request is
// a Result (Succeeded false, or Err set), never a replication failure.
type Result struct {
	Revision  int64 // store revision after the command (the Txn's revision if it wrote)
	Succeeded bool  // CmdTxn: every compare held and Success ran
	Responses []OpResponse
	// Err is a state-machine error: ErrCompacted / ErrFutureRevision for a CmdCompact
	// outside (compact revision, current revision], ErrInvalidCommand, ErrTooManyOps,
	// ErrCorrupt / ErrUnknownFormat when the log entry could not be decoded.
	Err error
}

// PrefixEnd returns the smallest key greater than every key with the given prefix, so
// that [prefix, PrefixEnd(prefix)) is the prefix range. A prefix of all 0xff bytes (or an
// empty prefix) has no upper bound and yields nil, which Range treats as "to the end".
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
