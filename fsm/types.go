package fsm

import "errors"

// Sentinel errors of the state machine. Match them with errors.Is.
var (
	// ErrCompacted: the requested revision is older than the compact revision.
	ErrCompacted = errors.New("fsm: revision compacted")
	// ErrFutureRevision: the requested revision is newer than the current revision.
	ErrFutureRevision = errors.New("fsm: revision is in the future")
	// ErrKeyNotFound: no live key at the requested revision.
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
const MaxTxnOps = 128

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
}

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
)

// CompareResult is the relation a Compare asserts between the key's field and the operand.
type CompareResult uint8

const (
	CompareEqual    CompareResult = 1
	CompareNotEqual CompareResult = 2
	CompareLess     CompareResult = 3 // field < operand
	CompareGreater  CompareResult = 4 // field > operand
)

// Compare is one guard of a transaction, evaluated against the latest revision.
type Compare struct {
	Key    []byte
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
	// Lease commands (CommandFormatV3, see lease.go).
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
