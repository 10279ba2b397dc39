package api

// TxnRequest is the body of POST /v1/txn: an atomic, guarded list of operations. If
// every Compare holds against the latest revision, Success runs, otherwise Failure
// runs. All writes of one transaction share one revision. Each list holds at most 128
// entries; unknown JSON fields are rejected.
//
//	{
//	  "compare": [{"key":"a","target":"mod_revision","result":"equal","int":7}],
//	  "success": [{"type":"put","key":"a","value":"aGk="},
//	              {"type":"delete_range","key":"tmp/","prefix":true}],
//	  "failure": [{"type":"get","key":"a"}]
//	}
type TxnRequest struct {
	// Compare lists the guards; all must hold for Success to run.
	Compare []Compare `json:"compare,omitempty"`
	// Success runs when every guard holds.
	Success []Op `json:"success,omitempty"`
	// Failure runs when some guard fails.
	Failure []Op `json:"failure,omitempty"`
}

// Compare targets: which field of the key a Compare looks at.
const (
	// TargetValue compares Compare.Value with the key's value bytes.
	TargetValue = "value"
	// TargetVersion compares Compare.Int with the key's version (0 when absent).
	TargetVersion = "version"
	// TargetModRevision compares Compare.Int with the key's mod revision (0 when absent).
	TargetModRevision = "mod_revision"
	// TargetCreateRevision compares Compare.Int with the key's create revision (0 when absent).
	TargetCreateRevision = "create_revision"
	// TargetExists: Int 1 = the key exists, 0 = absent; only "equal" and "not_equal".
	TargetExists = "exists"
)

// Compare results: the relation asserted between the key's field and the operand.
const (
	ResultEqual    = "equal"
	ResultNotEqual = "not_equal"
	ResultLess     = "less"    // field < operand
	ResultGreater  = "greater" // field > operand
)

// Compare is one guard of a transaction.
//
//	{"key":"a","target":"value","result":"equal","value":"aGk="}
//	{"key":"a","target":"mod_revision","result":"less","int":10}
type Compare struct {
	// Key is the key whose field is compared.
	Key string `json:"key"`
	// Target is one of the Target constants.
	Target string `json:"target"`
	// Result is one of the Result constants.
	Result string `json:"result"`
	// Value is the operand for target "value" (base64).
	Value []byte `json:"value,omitempty"`
	// Int is the operand for every other target.
	Int int64 `json:"int,omitempty"`
}

// Op types.
const (
	// OpPut writes Key = Value.
	OpPut = "put"
	// OpDelete deletes Key.
	OpDelete = "delete"
	// OpDeleteRange deletes every key in [Key, End), or with Prefix every key starting
	// with Key.
	OpDeleteRange = "delete_range"
	// OpGet reads Key, or the range [Key, End) / the prefix Key when End / Prefix is set,
	// at the revision the transaction runs at.
	OpGet = "get"
)

// Op is one operation of a transaction.
//
//	{"type":"put","key":"a","value":"aGk="}
//	{"type":"get","key":"users/","prefix":true,"limit":100}
type Op struct {
	// Type is one of the Op constants.
	Type string `json:"type"`
	// Key is the key, or the start of the range for delete_range and ranged get.
	Key string `json:"key"`
	// End is the exclusive end of the range (delete_range, ranged get); it must sort
	// after Key. Mutually exclusive with Prefix.
	End string `json:"end,omitempty"`
	// Prefix makes the range every key starting with Key (delete_range, get).
	Prefix bool `json:"prefix,omitempty"`
	// Value is the value to write (put only), base64.
	Value []byte `json:"value,omitempty"`
	// Limit bounds the items of a ranged get; 0 means the server's maximum list limit
	// (10000 by default). OpResponse.More says whether the limit cut the result.
	Limit int64 `json:"limit,omitempty"`
	// Lease attaches the key of a put to this lease (see PathLeases); 0 or absent
	// attaches it to none, detaching it. A missing lease fails the whole transaction
	// with 404 LeaseNotFound, nothing written.
	Lease int64 `json:"lease,omitempty"`
}

// TxnResponse answers POST /v1/txn.
//
//	{"revision":12,"succeeded":true,"responses":[{"type":"put","prev_kv":{...}}]}
type TxnResponse struct {
	// Revision is the revision of the transaction's writes, or the current revision
	// when it wrote nothing.
	Revision int64 `json:"revision"`
	// Succeeded is true when every compare held and Success ran.
	Succeeded bool `json:"succeeded"`
	// Responses holds one entry per executed op, in order.
	Responses []OpResponse `json:"responses"`
}

// OpResponse is the outcome of one executed Op.
type OpResponse struct {
	// Type is the op's type.
	Type string `json:"type"`
	// Deleted is the number of keys deleted (delete, delete_range).
	Deleted int64 `json:"deleted,omitempty"`
	// PrevKV is the previous version of the key (put, delete), absent if none.
	PrevKV *KV `json:"prev_kv,omitempty"`
	// KVs are the keys read (get); empty when the key is absent.
	KVs []KV `json:"kvs,omitempty"`
	// More is true when Limit cut a ranged get.
	More bool `json:"more,omitempty"`
}

// CompactRequest is the body of POST /v1/compact: discard history at and below
// Revision, so reads below it fail with 410 ResourceExpired. Revision must be above the
// current compact revision and at most the current revision.
//
//	{"revision":100}
type CompactRequest struct {
	// Revision is the new compact revision.
	Revision int64 `json:"revision"`
}

// CompactResponse answers POST /v1/compact.
//
//	{"revision":120,"compact_revision":100}
type CompactResponse struct {
	// Revision is the store revision when the compaction applied.
	Revision int64 `json:"revision"`
	// CompactRevision is the new compact revision.
	CompactRevision int64 `json:"compact_revision"`
}
