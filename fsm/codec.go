package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/keel-kv/keel/internal/wire"
)

// Binary encodings of commands and results. Every encoding starts with a format byte so
// that a node can tell bytes it cannot read (ErrUnknownFormat, from a newer release)
// from bytes that are damaged (ErrCorrupt). Decoders check every length against the
// bytes left before allocating, so hostile input cannot make them panic or balloon.

// Command formats. EncodeCommand writes the oldest format that can hold the command:
// V1 unless some op carries an encoding tag, which needs V2 (V1 plus the tag after each
// op), or the command deals with leases, which needs V3 (V2 plus a lease ID after each
// op, and the lease command types; see lease_codec.go), or the transaction uses what
// etcd's KV API adds (nested transactions, compares over a range or of a lease, the
// Op fields PrevKV, IgnoreValue, IgnoreLease, Range and Txn), which needs V4 (V3 plus a
// range end after each compare and an option block after each op; see codec_v4.go),
// or the command grants a lease with an owner, which needs V5 (V4 plus the owner after
// a grant's TTL; see lease_codec.go).
// The range of formats a node can apply is reported in membership metadata, and
// raft.Node refuses to propose a format that some voter cannot apply.
const (
	CommandFormatV1 byte = 1
	CommandFormatV2 byte = 2
	CommandFormatV3 byte = 3
	CommandFormatV4 byte = 4
	CommandFormatV5 byte = 5
)

// MinCommandFormat and MaxCommandFormat bound the formats DecodeCommand accepts.
const (
	MinCommandFormat = CommandFormatV1
	MaxCommandFormat = CommandFormatV5
)

// commandFormat is the format EncodeCommand uses for cmd.
func commandFormat(cmd *Command) byte {
	if isLeaseCommand(cmd.Type) {
		if cmd.Type == CmdLeaseGrant && cmd.LeaseOwner != "" {
			return CommandFormatV5
		}
		return CommandFormatV3
	}
	if cmd.Type == CmdTxn && cmd.Txn != nil {
		return txnFormat(cmd.Txn)
	}
	return CommandFormatV1
}

// txnFormat is the oldest format that holds t and its nested transactions.
func txnFormat(t *Txn) byte {
	f := CommandFormatV1
	for _, c := range t.Compares {
		if c.End != nil || c.Target == TargetLease {
			return CommandFormatV4
		}
	}
	for _, ops := range [][]Op{t.Success, t.Failure} {
		for _, op := range ops {
			switch {
			case opNeedsV4(op):
				return CommandFormatV4
			case op.Lease != 0:
				f = CommandFormatV3
			case op.Encoding != "":
				f = max(f, CommandFormatV2)
			}
		}
	}
	return f
}

// Result formats: V2 adds each KeyValue's encoding tag, V3 its lease, V4 (V3 plus
// OpResponse.PrevKVs, Count and nested Txn results) what answers to format-4 commands
// hold. EncodeResult writes V1 unless a KeyValue carries a tag, so a node of an older
// release can decode untagged results; it never writes V3, which only
// EncodeResultWithLeases does, for a node that said it decodes it. Either writes V4,
// leases included, for a result that needs it: only a format-4 command yields one, and
// a node that proposed one decodes V4.
const (
	resultFormatV1 byte = 1
	resultFormatV2 byte = 2
	resultFormatV3 byte = 3
	resultFormatV4 byte = 4
)

// EncodeCommand encodes cmd for the Raft log.
func EncodeCommand(cmd *Command) ([]byte, error) {
	if cmd == nil {
		return nil, fmt.Errorf("%w: nil command", ErrInvalidCommand)
	}
	format := commandFormat(cmd)
	b := make([]byte, 0, 64+cmdSizeHint(cmd))
	b = append(b, format, byte(cmd.Type))
	switch cmd.Type {
	case CmdTxn:
		if cmd.Txn == nil {
			return nil, fmt.Errorf("%w: transaction missing", ErrInvalidCommand)
		}
		b = appendTxn(b, cmd.Txn, format)
	case CmdCompact:
		b = binary.AppendVarint(b, cmd.Revision)
	case CmdClusterMeta:
		b = appendBytes(b, []byte(cmd.ClusterID))
		b = appendBytes(b, cmd.Secret)
	case CmdLeaseGrant, CmdLeaseRevoke, CmdLeaseCheckpoint:
		b = appendLeaseCommand(b, cmd, format)
	default:
		return nil, fmt.Errorf("%w: unknown command type %d", ErrInvalidCommand, cmd.Type)
	}
	return b, nil
}

func cmdSizeHint(cmd *Command) int {
	if cmd.Txn == nil {
		return 0
	}
	n := 0
	for _, ops := range [][]Op{cmd.Txn.Success, cmd.Txn.Failure} {
		for _, op := range ops {
			n += len(op.Key) + len(op.End) + len(op.Value) + 8
		}
	}
	return n
}

// appendTxn appends the body of a transaction: compares, success ops, failure ops.
func appendTxn(b []byte, t *Txn, format byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(t.Compares)))
	for _, c := range t.Compares {
		b = appendBytes(b, c.Key)
		b = append(b, byte(c.Target), byte(c.Result))
		b = appendBytes(b, c.Value)
		b = binary.AppendVarint(b, c.Int)
		if format >= CommandFormatV4 {
			b = appendOptBytes(b, c.End)
		}
	}
	b = appendOps(b, t.Success, format)
	return appendOps(b, t.Failure, format)
}

// appendOptBytes appends p keeping nil apart from empty.
func appendOptBytes(b, p []byte) []byte {
	if p == nil {
		return append(b, 0)
	}
	return appendBytes(append(b, 1), p)
}

func appendOps(b []byte, ops []Op, format byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(ops)))
	for _, op := range ops {
		b = append(b, byte(op.Type))
		b = appendBytes(b, op.Key)
		// End keeps nil apart from empty: nil makes OpGet a single-key read.
		b = appendOptBytes(b, op.End)
		b = appendBytes(b, op.Value)
		b = binary.AppendVarint(b, op.Limit)
		if format >= CommandFormatV2 {
			b = appendBytes(b, []byte(op.Encoding))
		}
		if format >= CommandFormatV3 {
			b = binary.AppendVarint(b, op.Lease)
		}
		if format >= CommandFormatV4 {
			b = appendOpV4(b, op, format)
		}
	}
	return b
}

// DecodeCommand decodes bytes written by EncodeCommand. Byte slices in the result
// alias data. It returns ErrUnknownFormat or ErrCorrupt (wrapped) on bad input.
func DecodeCommand(data []byte) (*Command, error) {
	d := newDecoder(data)
	format := d.Uint8("format")
	if d.Err() != nil {
		return nil, fmt.Errorf("%w: empty command", ErrCorrupt)
	}
	if format < MinCommandFormat || format > MaxCommandFormat {
		return nil, fmt.Errorf("%w: command format %d (this build reads %d..%d)",
			ErrUnknownFormat, format, MinCommandFormat, MaxCommandFormat)
	}
	cmd := &Command{Type: CommandType(d.Uint8("command type"))}
	switch cmd.Type {
	case CmdTxn:
		cmd.Txn = d.txn(format, 1)
	case CmdCompact:
		cmd.Revision = d.Varint("revision")
	case CmdClusterMeta:
		cmd.ClusterID = string(d.Bytes("cluster id", noMax))
		cmd.Secret = d.Bytes("secret", noMax)
	case CmdLeaseGrant, CmdLeaseRevoke, CmdLeaseCheckpoint:
		if format < CommandFormatV3 {
			d.Fail("lease command in format %d", format)
		}
		d.leaseCommand(cmd, format)
	default:
		if d.Err() == nil {
			return nil, fmt.Errorf("%w: unknown command type %d", ErrCorrupt, cmd.Type)
		}
	}
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// txn decodes a transaction body at nesting depth depth (1 = outer).
func (d decoder) txn(format byte, depth int) *Txn {
	t := &Txn{}
	n := d.Count("compares", 4)
	if n > 0 {
		t.Compares = make([]Compare, n)
	}
	for i := range t.Compares {
		c := &t.Compares[i]
		c.Key = d.Bytes("compare key", noMax)
		c.Target = CompareTarget(d.Uint8("compare target"))
		c.Result = CompareResult(d.Uint8("compare result"))
		c.Value = d.Bytes("compare value", noMax)
		c.Int = d.Varint("compare int")
		if format >= CommandFormatV4 {
			c.End = d.optBytes("compare range end")
		} else if c.Target == TargetLease {
			// Releases before format 4 refuse this target as invalid; so must this one,
			// or replicas of mixed releases would apply the entry differently.
			d.Fail("compare target lease in format %d", format)
		}
	}
	t.Success = d.ops(format, depth)
	t.Failure = d.ops(format, depth)
	return t
}

// optBytes decodes what appendOptBytes wrote.
func (d decoder) optBytes(what string) []byte {
	switch d.Uint8(what + " flag") {
	case 0:
		return nil
	case 1:
		if p := d.Bytes(what, noMax); p != nil {
			return p
		}
		return []byte{}
	}
	d.Fail("bad %s flag", what)
	return nil
}

func (d decoder) ops(format byte, depth int) []Op {
	n := d.Count("ops", 5)
	if n == 0 {
		return nil
	}
	ops := make([]Op, n)
	for i := range ops {
		op := &ops[i]
		op.Type = OpType(d.Uint8("op type"))
		op.Key = d.Bytes("key", noMax)
		op.End = d.optBytes("range end")
		op.Value = d.Bytes("value", noMax)
		op.Limit = d.Varint("limit")
		if format >= CommandFormatV2 {
			op.Encoding = string(d.Bytes("encoding", noMax))
		}
		if format >= CommandFormatV3 {
			op.Lease = d.Varint("lease")
		}
		if format >= CommandFormatV4 {
			d.opV4(op, format, depth)
		}
		if d.Err() != nil {
			return nil
		}
	}
	return ops
}

// Error codes carried in encoded results; the message travels too.
const (
	codeNone byte = iota
	codeCompacted
	codeFuture
	codeNotFound
	codeTooManyOps
	codeInvalid
	codeUnknownFormat
	codeCorrupt
	codeOther
	codeLeaseNotFound // appended: codes are wire values shared with other releases
	codeLeaseExists
)

var codeErrors = map[byte]error{
	codeCompacted: ErrCompacted, codeFuture: ErrFutureRevision, codeNotFound: ErrKeyNotFound,
	codeTooManyOps: ErrTooManyOps, codeInvalid: ErrInvalidCommand,
	codeUnknownFormat: ErrUnknownFormat, codeCorrupt: ErrCorrupt,
	codeLeaseNotFound: ErrLeaseNotFound, codeLeaseExists: ErrLeaseExists,
}

func errorCode(err error) byte {
	if err == nil {
		return codeNone
	}
	for code, sentinel := range codeErrors {
		if errors.Is(err, sentinel) {
			return code
		}
	}
	return codeOther
}

// remoteError is a Result error decoded from another node: its message, and the
// sentinel it wrapped there so that errors.Is still works here.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// EncodeResult encodes a Result for forwarding from the leader to the node a client
// called, without the keys' leases: a node of any release since v0.8 decodes it.
func EncodeResult(r *Result) ([]byte, error) { return encodeResult(r, false) }

// EncodeResultWithLeases is EncodeResult with each KeyValue's lease, for a node of
// this release or later (older ones refuse the format it needs for a leased key).
func EncodeResultWithLeases(r *Result) ([]byte, error) { return encodeResult(r, true) }

func encodeResult(r *Result, leases bool) ([]byte, error) {
	if r == nil {
		return nil, errors.New("fsm: nil result")
	}
	format := resultFormat(r, leases)
	b := make([]byte, 0, 64)
	b = append(b, format)
	b = binary.AppendVarint(b, r.Revision)
	b = appendBool(b, r.Succeeded)
	code := errorCode(r.Err)
	b = append(b, code)
	if code != codeNone {
		b = appendBytes(b, []byte(r.Err.Error()))
	}
	return appendResponses(b, r.Responses, format), nil
}

func appendResponses(b []byte, resps []OpResponse, format byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(resps)))
	for _, resp := range resps {
		b = append(b, byte(resp.Type))
		b = binary.AppendVarint(b, resp.Deleted)
		b = appendBool(b, resp.PrevKV != nil)
		if resp.PrevKV != nil {
			b = appendKV(b, *resp.PrevKV, format)
		}
		b = appendKVs(b, resp.KVs, format)
		b = appendBool(b, resp.More)
		if format >= resultFormatV4 {
			b = appendResponseV4(b, resp, format)
		}
	}
	return b
}

func appendKVs(b []byte, kvs []KeyValue, format byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(kvs)))
	for _, kv := range kvs {
		b = appendKV(b, kv, format)
	}
	return b
}

// resultFormat is the oldest format that carries what r holds (leases only when asked).
func resultFormat(r *Result, leases bool) byte {
	if responsesNeedV4(r.Responses) {
		return resultFormatV4
	}
	f := resultFormatV1
	need := func(kv *KeyValue) {
		if leases && kv.Lease != 0 {
			f = resultFormatV3
		} else if kv.Encoding != "" {
			f = max(f, resultFormatV2)
		}
	}
	for _, resp := range r.Responses {
		if resp.PrevKV != nil {
			need(resp.PrevKV)
		}
		for i := range resp.KVs {
			need(&resp.KVs[i])
		}
	}
	return f
}

// DecodeResult decodes bytes written by EncodeResult.
func DecodeResult(data []byte) (*Result, error) {
	d := newDecoder(data)
	format := d.Uint8("format")
	if d.Err() == nil && (format < resultFormatV1 || format > resultFormatV4) {
		return nil, fmt.Errorf("%w: result format %d", ErrUnknownFormat, format)
	}
	r := &Result{Revision: d.Varint("revision"), Succeeded: d.bool()}
	if code := d.Uint8("error code"); code != codeNone && d.Err() == nil {
		msg := string(d.Bytes("error message", noMax))
		sentinel, ok := codeErrors[code]
		if !ok && code != codeOther {
			d.Fail("unknown error code")
		}
		if sentinel == nil {
			r.Err = errors.New(msg)
		} else {
			r.Err = &remoteError{msg: msg, sentinel: sentinel}
		}
	}
	r.Responses = d.responses(format, 1)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	return r, nil
}

// responses decodes what appendResponses wrote, at nesting depth depth (1 = outer).
func (d decoder) responses(format byte, depth int) []OpResponse {
	n := d.Count("responses", 4)
	if n == 0 {
		return nil
	}
	resps := make([]OpResponse, n)
	for i := range resps {
		resp := &resps[i]
		resp.Type = OpType(d.Uint8("op type"))
		resp.Deleted = d.Varint("deleted")
		if d.bool() {
			kv := d.kv(format)
			resp.PrevKV = &kv
		}
		resp.KVs = d.kvs(format)
		resp.More = d.bool()
		if format >= resultFormatV4 {
			d.responseV4(resp, format, depth)
		}
		if d.Err() != nil {
			return nil
		}
	}
	return resps
}

func (d decoder) kvs(format byte) []KeyValue {
	n := d.Count("kvs", 5)
	if n == 0 {
		return nil
	}
	kvs := make([]KeyValue, n)
	for j := range kvs {
		kvs[j] = d.kv(format)
	}
	return kvs
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendKV(b []byte, kv KeyValue, format byte) []byte {
	b = appendBytes(b, kv.Key)
	b = appendBytes(b, kv.Value)
	b = binary.AppendVarint(b, kv.CreateRevision)
	b = binary.AppendVarint(b, kv.ModRevision)
	b = binary.AppendVarint(b, kv.Version)
	if format >= resultFormatV2 {
		b = appendBytes(b, []byte(kv.Encoding))
	}
	if format >= resultFormatV3 {
		b = binary.AppendVarint(b, kv.Lease)
	}
	return b
}

// decoder reads the encodings above: a wire.Reader (the first problem sticks, wrapping
// ErrCorrupt; later reads return zero values, so decode functions check once at the
// end) with the few compound fields of this package.
type decoder struct{ *wire.Reader }

// noMax: the codec bounds byte strings by the bytes present only.
const noMax = math.MaxUint64

func newDecoder(data []byte) decoder { return decoder{wire.NewReader(data, ErrCorrupt)} }

func (d decoder) bool() bool {
	switch d.Uint8("bool") {
	case 0:
		return false
	case 1:
		return true
	}
	d.Fail("bad bool")
	return false
}

func (d decoder) kv(format byte) KeyValue {
	kv := KeyValue{Key: d.Bytes("key", noMax), Value: d.Bytes("value", noMax), CreateRevision: d.Varint("create revision"),
		ModRevision: d.Varint("mod revision"), Version: d.Varint("version")}
	if format >= resultFormatV2 {
		kv.Encoding = string(d.Bytes("encoding", noMax))
	}
	if format >= resultFormatV3 {
		kv.Lease = d.Varint("lease")
	}
	return kv
}
