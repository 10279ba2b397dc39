package differential

import (
	"fmt"
	"math/rand"
	"strings"
)

// The generator: a sequence of abstract operations drawn from a seed alone (never
// from the servers' answers, so a seed always means the same operations). Keys are
// names relative to the sequence's prefix; revisions are ranks (rank 0: the revision
// before the sequence's first write, rank i: its i-th write), leases indexes into the
// sequence's grants; the runner turns them into each server's numbers.

type kind int

const (
	kPut kind = iota
	kGet
	kDelete
	kTxn
	kCompact
	kGrant
	kRevoke
	kTimeToLive
	kWatch
	kLeases
)

var kindNames = [...]string{"put", "get", "delete", "txn", "compact", "grant", "revoke", "ttl", "watch", "leases"}

// keys are the names a sequence writes, in byte order; ends add names that no put
// writes, so that ranges end between keys too.
var (
	keys = []string{"a", "a/1", "a/2", "b", "b/1", "c"}
	ends = []string{"a/", "a/3", "b", "b0", "c", "d"}
)

// values are what puts write and VALUE compares compare with: empty, ordered ASCII,
// and bytes that are not UTF-8 (values may be any bytes on both servers).
var values = []string{"x", "y", "z", "", "xx", "\x00\xff"}

// End kinds of a range: none (one key), an explicit end, a prefix, from key on.
const (
	endNone = iota
	endKey
	endPrefix
	endFrom
)

// rng is a range of keys: one key, or a range whose end sorts after key.
type rng struct {
	key  string
	kind int
	end  string // endKey only
}

// cmpOp is one compare of a transaction.
type cmpOp struct {
	target string // value, version, create, mod, lease
	rng    rng
	result string // = != < >
	value  string // value
	num    int64  // version
	rank   int    // create, mod: a rank; -1 = 0 (absent)
	lease  int    // lease: an index; -1 = no lease
}

// op is one abstract operation; which fields matter depends on kind.
type op struct {
	kind   kind
	rng    rng
	value  string
	prevKV bool
	lease  int // put, revoke, ttl: index of a grant, -1 none; an index past the grants is a lease never granted
	ignVal bool
	ignLse bool

	// get
	rank               int // get: -1 = latest; compact, watch: the rank
	future             bool
	limit              int64
	keysOnly, countOnl bool
	serializable       bool
	sortTarget         int32
	sortOrder          int32
	minMod, maxMod     int // ranks, -1 = no filter
	minCre, maxCre     int

	// txn
	cmps         []cmpOp
	then, els    []op
	noPut, noDel bool // watch filters

	ttl int64
}

// generate draws a sequence of n operations from seed.
func generate(seed int64, n int) []op {
	r := rand.New(rand.NewSource(seed))
	ops := make([]op, 0, n)
	for i := 0; i < n; i++ {
		ops = append(ops, genOp(r, i+1, 1))
	}
	return ops
}

// genOp draws one operation; maxRank bounds the ranks it names (the runner clamps
// them to the writes that happened), depth is the transaction nesting depth.
func genOp(r *rand.Rand, maxRank, depth int) op {
	w := r.Intn(100)
	switch {
	case w < 30:
		return genPut(r)
	case w < 54:
		return genGet(r, maxRank, false)
	case w < 64:
		return op{kind: kDelete, rng: genRange(r, true), prevKV: r.Intn(2) == 0}
	case w < 79:
		return genTxn(r, maxRank, depth)
	case w < 82:
		return op{kind: kCompact, rank: 1 + r.Intn(maxRank)}
	case w < 89:
		return op{kind: kGrant, ttl: int64(30 + r.Intn(600))}
	case w < 91:
		return op{kind: kRevoke, lease: r.Intn(3)}
	case w < 93:
		return op{kind: kTimeToLive, lease: r.Intn(4)}
	case w < 94:
		return op{kind: kLeases}
	}
	return op{kind: kWatch, rng: genRange(r, true), rank: 1 + r.Intn(maxRank), prevKV: r.Intn(2) == 0,
		noPut: r.Intn(6) == 0, noDel: r.Intn(6) == 0}
}

func genPut(r *rand.Rand) op {
	o := op{kind: kPut, rng: rng{key: pick(r, keys)}, value: pick(r, values),
		prevKV: r.Intn(2) == 0, lease: -1}
	if r.Intn(4) == 0 {
		o.lease = r.Intn(2)
	}
	switch r.Intn(12) {
	case 0:
		o.ignVal, o.value = true, ""
	case 1:
		o.ignLse, o.lease = true, -1
	}
	return o
}

// genRange draws a range; ranged says ranges are allowed (else one key).
func genRange(r *rand.Rand, ranged bool) rng {
	g := rng{key: pick(r, keys)}
	if !ranged {
		return g
	}
	switch r.Intn(4) {
	case endKey:
		var after []string
		for _, e := range append(append([]string{}, keys...), ends...) {
			if e > g.key {
				after = append(after, e)
			}
		}
		g.kind, g.end = endKey, pick(r, after)
	case endPrefix:
		g.kind = endPrefix
		if r.Intn(3) == 0 {
			g.key = "" // the whole sequence: its prefix
		}
	case endFrom:
		g.kind = endFrom
	}
	return g
}

func genGet(r *rand.Rand, maxRank int, inTxn bool) op {
	o := op{kind: kGet, rng: genRange(r, true), rank: -1, minMod: -1, maxMod: -1, minCre: -1, maxCre: -1}
	if r.Intn(4) == 0 {
		o.rank = r.Intn(maxRank + 1)
		o.future = r.Intn(10) == 0
	}
	if r.Intn(3) == 0 {
		o.limit = int64(1 + r.Intn(3))
	}
	o.keysOnly = r.Intn(5) == 0
	o.countOnl = r.Intn(8) == 0
	o.serializable = !inTxn && r.Intn(5) == 0
	if r.Intn(3) == 0 {
		o.sortTarget, o.sortOrder = int32(r.Intn(5)), int32(r.Intn(3))
		if o.sortTarget != 0 && o.sortOrder == 0 {
			o.limit = 0 // etcd sorts only a page then (normalise_test.go, accepted differences)
		}
	}
	filter := func() int {
		if r.Intn(6) == 0 {
			return r.Intn(maxRank + 1)
		}
		return -1
	}
	o.minMod, o.maxMod, o.minCre, o.maxCre = filter(), filter(), filter(), filter()
	return o
}

// genTxn draws a transaction. Three in four are clean: no key is written twice
// anywhere in them (so that most transactions run rather than meet etcd's
// duplicate-key refusal); the others are drawn freely, and some are refused.
func genTxn(r *rand.Rand, maxRank, depth int) op {
	var used map[string]bool
	if r.Intn(4) > 0 {
		used = map[string]bool{}
	}
	return genTxnIn(r, maxRank, depth, used)
}

// genTxnIn draws a transaction; used, when not nil, holds the keys the enclosing
// transaction writes, and only other keys are written, one at a time.
func genTxnIn(r *rand.Rand, maxRank, depth int, used map[string]bool) op {
	o := op{kind: kTxn}
	for i := r.Intn(3); i > 0; i-- {
		o.cmps = append(o.cmps, genCmp(r, maxRank))
	}
	o.then, o.els = genBranch(r, maxRank, depth, used), genBranch(r, maxRank, depth, used)
	return o
}

func genBranch(r *rand.Rand, maxRank, depth int, used map[string]bool) []op {
	var ops []op
	for i := r.Intn(4); i > 0; i-- {
		switch w := r.Intn(10); {
		case w < 4:
			p := genPut(r)
			p.ignVal, p.ignLse = false, false
			if writable(p.rng, used) {
				ops = append(ops, p)
			}
		case w < 6:
			ops = append(ops, genGet(r, maxRank, true))
		case w < 8:
			// no delete from key on inside a transaction, and none in a nested one
			// of a transaction drawn freely: etcd's duplicate-key check would let
			// through deleting a key the transaction puts (normalise_test.go,
			// accepted differences)
			if used == nil && depth > 1 {
				continue
			}
			g := genRange(r, used == nil)
			if g.kind == endFrom {
				g.kind = endPrefix
			}
			if writable(g, used) {
				ops = append(ops, op{kind: kDelete, rng: g, prevKV: r.Intn(2) == 0})
			}
		default:
			if depth < 3 {
				ops = append(ops, genTxnIn(r, maxRank, depth+1, used))
			}
		}
	}
	return ops
}

// writable reports whether a clean transaction (used not nil) may write g, and
// records it; g is then one key.
func writable(g rng, used map[string]bool) bool {
	if used == nil {
		return true
	}
	if g.kind != endNone || used[g.key] {
		return false
	}
	used[g.key] = true
	return true
}

func genCmp(r *rand.Rand, maxRank int) cmpOp {
	c := cmpOp{target: pick(r, []string{"value", "version", "create", "mod", "lease"}),
		rng: genRange(r, r.Intn(4) == 0), result: pick(r, []string{"=", "!=", "<", ">"}), rank: -1, lease: -1}
	if c.rng.kind == endPrefix && c.rng.key == "" {
		c.rng.key = "a"
	}
	switch c.target {
	case "value":
		c.value = pick(r, values)
	case "version":
		c.num = int64(r.Intn(4))
	case "create", "mod":
		if r.Intn(4) > 0 {
			c.rank = r.Intn(maxRank + 1)
		}
	case "lease":
		// < and > only against 0 ("has a lease"): the order of two lease IDs is the
		// servers' choice (normalise_test.go)
		if r.Intn(3) > 0 && (c.result == "=" || c.result == "!=") {
			c.lease = r.Intn(3)
		}
	}
	return c
}

func pick(r *rand.Rand, from []string) string { return from[r.Intn(len(from))] }

// String is the operation as the failure report prints it.
func (o op) String() string {
	var b strings.Builder
	b.WriteString(kindNames[o.kind])
	switch o.kind {
	case kPut:
		fmt.Fprintf(&b, " %s=%q", o.rng, o.value)
		flag(&b, o.prevKV, "prev_kv")
		flag(&b, o.ignVal, "ignore_value")
		flag(&b, o.ignLse, "ignore_lease")
		if o.lease >= 0 {
			fmt.Fprintf(&b, " lease=L%d", o.lease)
		}
	case kGet:
		fmt.Fprintf(&b, " %s", o.rng)
		if o.rank >= 0 {
			fmt.Fprintf(&b, " rev=r%d", o.rank)
		}
		flag(&b, o.future, "(future)")
		if o.limit > 0 {
			fmt.Fprintf(&b, " limit=%d", o.limit)
		}
		flag(&b, o.keysOnly, "keys_only")
		flag(&b, o.countOnl, "count_only")
		flag(&b, o.serializable, "serializable")
		if o.sortTarget != 0 || o.sortOrder != 0 {
			fmt.Fprintf(&b, " sort=%d/%d", o.sortTarget, o.sortOrder)
		}
		for _, f := range []struct {
			n string
			v int
		}{{"min_mod", o.minMod}, {"max_mod", o.maxMod}, {"min_create", o.minCre}, {"max_create", o.maxCre}} {
			if f.v >= 0 {
				fmt.Fprintf(&b, " %s=r%d", f.n, f.v)
			}
		}
	case kDelete:
		fmt.Fprintf(&b, " %s", o.rng)
		flag(&b, o.prevKV, "prev_kv")
	case kTxn:
		b.WriteString(" if")
		for _, c := range o.cmps {
			fmt.Fprintf(&b, " [%s]", c)
		}
		fmt.Fprintf(&b, " then %v else %v", o.then, o.els)
	case kCompact:
		fmt.Fprintf(&b, " r%d", o.rank)
	case kGrant:
		fmt.Fprintf(&b, " ttl=%d", o.ttl)
	case kRevoke, kTimeToLive:
		fmt.Fprintf(&b, " L%d", o.lease)
	case kWatch:
		fmt.Fprintf(&b, " %s from r%d", o.rng, o.rank)
		flag(&b, o.prevKV, "prev_kv")
		flag(&b, o.noPut, "noput")
		flag(&b, o.noDel, "nodelete")
	}
	return b.String()
}

func flag(b *strings.Builder, on bool, name string) {
	if on {
		b.WriteString(" " + name)
	}
}

func (g rng) String() string {
	switch g.kind {
	case endKey:
		return fmt.Sprintf("[%q,%q)", g.key, g.end)
	case endPrefix:
		return fmt.Sprintf("%q*", g.key)
	case endFrom:
		return fmt.Sprintf("[%q,∞)", g.key)
	}
	return fmt.Sprintf("%q", g.key)
}

func (c cmpOp) String() string {
	arg := ""
	switch c.target {
	case "value":
		arg = fmt.Sprintf("%q", c.value)
	case "version":
		arg = fmt.Sprint(c.num)
	case "create", "mod":
		arg = "0"
		if c.rank >= 0 {
			arg = fmt.Sprintf("r%d", c.rank)
		}
	case "lease":
		arg = "0"
		if c.lease >= 0 {
			arg = fmt.Sprintf("L%d", c.lease)
		}
	}
	return fmt.Sprintf("%s(%s) %s %s", c.target, c.rng, c.result, arg)
}
