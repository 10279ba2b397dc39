package fsm

import "encoding/binary"

// Command format 4 (etcd's KV API) appends to each op, after format 3's lease:
//
//	flags byte: 1 PrevKV, 2 IgnoreValue, 4 IgnoreLease, 8 range options follow,
//	            16 a nested transaction follows; other bits are corrupt
//	range options (flag 8): Revision varint, SortOrder byte, SortTarget byte,
//	            a byte of bools (1 KeysOnly, 2 CountOnly, 4 WithCount),
//	            MinModRevision, MaxModRevision, MinCreateRevision, MaxCreateRevision varints
//	nested transaction (flag 16): a transaction body as at the top (appendTxn)
//
// and to each compare, after its int, its range end (a nil/present flag, then bytes).
// Result format 4 appends to each response, after More: PrevKVs (count, key-values),
// Count varint, and a flag byte followed, when 1, by the nested result's Succeeded and
// responses. Decoders refuse nesting deeper than MaxTxnDepth, so hostile bytes cannot
// exhaust the stack.

const (
	opFlagPrevKV byte = 1 << iota
	opFlagIgnoreValue
	opFlagIgnoreLease
	opFlagRange
	opFlagTxn
	opFlagsKnown = opFlagTxn<<1 - 1
)

const (
	rangeFlagKeysOnly byte = 1 << iota
	rangeFlagCountOnly
	rangeFlagWithCount
	rangeFlagsKnown = rangeFlagWithCount<<1 - 1
)

// opNeedsV4 reports whether op carries a field only format 4 holds.
func opNeedsV4(op Op) bool {
	return op.Type == OpTxn || op.PrevKV || op.IgnoreValue || op.IgnoreLease ||
		op.Range != (RangeOptions{}) || op.Txn != nil
}

func appendOpV4(b []byte, op Op, format byte) []byte {
	var flags byte
	if op.PrevKV {
		flags |= opFlagPrevKV
	}
	if op.IgnoreValue {
		flags |= opFlagIgnoreValue
	}
	if op.IgnoreLease {
		flags |= opFlagIgnoreLease
	}
	if op.Range != (RangeOptions{}) {
		flags |= opFlagRange
	}
	if op.Txn != nil {
		flags |= opFlagTxn
	}
	b = append(b, flags)
	if flags&opFlagRange != 0 {
		o := &op.Range
		b = binary.AppendVarint(b, o.Revision)
		var bools byte
		if o.KeysOnly {
			bools |= rangeFlagKeysOnly
		}
		if o.CountOnly {
			bools |= rangeFlagCountOnly
		}
		if o.WithCount {
			bools |= rangeFlagWithCount
		}
		b = append(b, byte(o.SortOrder), byte(o.SortTarget), bools)
		for _, v := range []int64{o.MinModRevision, o.MaxModRevision, o.MinCreateRevision, o.MaxCreateRevision} {
			b = binary.AppendVarint(b, v)
		}
	}
	if op.Txn != nil {
		b = appendTxn(b, op.Txn, format)
	}
	return b
}

// opV4 decodes what appendOpV4 wrote into op, an op of a transaction at depth.
func (d decoder) opV4(op *Op, format byte, depth int) {
	flags := d.Uint8("op flags")
	if flags&^opFlagsKnown != 0 {
		d.Fail("unknown op flags %#x", flags)
		return
	}
	op.PrevKV = flags&opFlagPrevKV != 0
	op.IgnoreValue = flags&opFlagIgnoreValue != 0
	op.IgnoreLease = flags&opFlagIgnoreLease != 0
	if flags&opFlagRange != 0 {
		o := &op.Range
		o.Revision = d.Varint("range revision")
		o.SortOrder = SortOrder(d.Uint8("sort order"))
		o.SortTarget = SortTarget(d.Uint8("sort target"))
		bools := d.Uint8("range flags")
		if bools&^rangeFlagsKnown != 0 {
			d.Fail("unknown range flags %#x", bools)
			return
		}
		o.KeysOnly = bools&rangeFlagKeysOnly != 0
		o.CountOnly = bools&rangeFlagCountOnly != 0
		o.WithCount = bools&rangeFlagWithCount != 0
		o.MinModRevision = d.Varint("min mod revision")
		o.MaxModRevision = d.Varint("max mod revision")
		o.MinCreateRevision = d.Varint("min create revision")
		o.MaxCreateRevision = d.Varint("max create revision")
	}
	if flags&opFlagTxn != 0 {
		if depth >= MaxTxnDepth {
			d.Fail("transactions nested deeper than %d", MaxTxnDepth)
			return
		}
		op.Txn = d.txn(format, depth+1)
	}
}

// responsesNeedV4 reports whether some response carries a field only result format 4
// holds.
func responsesNeedV4(resps []OpResponse) bool {
	for _, r := range resps {
		if r.PrevKVs != nil || r.Count != 0 || r.Txn != nil {
			return true
		}
	}
	return false
}

func appendResponseV4(b []byte, resp OpResponse, format byte) []byte {
	b = appendKVs(b, resp.PrevKVs, format)
	b = binary.AppendVarint(b, resp.Count)
	b = appendBool(b, resp.Txn != nil)
	if resp.Txn != nil {
		b = appendBool(b, resp.Txn.Succeeded)
		b = appendResponses(b, resp.Txn.Responses, format)
	}
	return b
}

// responseV4 decodes what appendResponseV4 wrote into resp, a response at depth.
func (d decoder) responseV4(resp *OpResponse, format byte, depth int) {
	resp.PrevKVs = d.kvs(format)
	resp.Count = d.Varint("count")
	if !d.bool() {
		return
	}
	if depth >= MaxTxnDepth {
		d.Fail("results nested deeper than %d", MaxTxnDepth)
		return
	}
	resp.Txn = &Result{Succeeded: d.bool()}
	resp.Txn.Responses = d.responses(format, depth+1)
}
