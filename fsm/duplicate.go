package fsm

import (
	"bytes"
	"fmt"
	"sort"
)

// CheckDuplicateKeys refuses, with ErrDuplicateKey, a transaction in which one branch
// writes a key twice: two puts of one key, or a put of a key that a delete or a
// delete_range of the same branch also covers, in either order. It is etcd's rule
// (server/etcdserver/api/v3rpc/key.go checkIntervals, "duplicate key given in txn
// request"): reads are free, and deletes may overlap each other, since deleting a key
// twice deletes it once. Each branch is checked on its own, because Success and Failure
// never both run.
//
// One branch, op by op:
//
//	put x=1, put x=2                  refused: x is put twice
//	put y, delete y                   refused: y is put and deleted
//	delete_range [z/, z0), put z/1    refused: z/1 lies in the deleted range
//	get x, get x                      allowed: reads only
//	get x, put x                      allowed: one write
//	delete y, delete y                allowed: deletes only (as in etcd)
//	Success: put x; Failure: put x    allowed: different branches
//
// Nested transactions (OpTxn) are checked as etcd's checkIntervals does, quirks
// included, so keel refuses exactly what etcd refuses. A level collects its own deletes
// first; then, nested transaction by nested transaction in order, the puts of the
// nested Success and Failure (and of their own nesting) must not repeat a put seen so
// far nor fall in a delete seen so far, except that a key put in both branches of one
// nested transaction is fine (only one runs); the nested transaction's deletes join the
// level's only after its puts were checked; last, the level's own puts are checked
// against all of it:
//
//	put a, Txn{Success: delete a}                  refused (the level's put meets the nested delete)
//	delete a, Txn{Success: put a}                  refused
//	Txn{S: put a, F: put a}, Txn{S: put a, F: put a}  refused (two nested transactions put a)
//	Txn{S: put a, F: put a}                        allowed (one of the two runs)
//	Txn{S: delete a}, Txn{S: delete a, F: delete a}  allowed (deletes only)
//	Txn{S: delete a}, Txn{S: put a}                refused (the delete was seen first)
//	Txn{S: put a}, Txn{S: delete a}                allowed: etcd checks a nested
//	                                               transaction's puts only against the
//	                                               deletes seen before it
//
// The state machine does not call it when it applies a command, on purpose. Releases
// before this check applied such transactions (the last write of a key wins, at one
// revision), and those entries can still be in a log or be proposed by an older node
// during a rolling upgrade; every replica must apply every entry the same way whatever
// its release, so refusing them at apply would split replicas and change history on
// replay. The rule is enforced where requests enter (package kv), before anything is
// proposed; see Store.txnLocked.
func CheckDuplicateKeys(t *Txn) error { return checkDuplicates(t, false) }

// CheckDuplicateKeysEtcd is CheckDuplicateKeys with one more etcd quirk, for the etcd
// door: a delete_range to the end of the keyspace (End empty, etcd's range_end "\x00")
// clashes with no put. etcd's checkIntervals makes it the interval [key, "\x00"),
// which its interval tree never finds overlapping a key, so etcd runs both writes.
func CheckDuplicateKeysEtcd(t *Txn) error { return checkDuplicates(t, true) }

func checkDuplicates(t *Txn, etcd bool) error {
	if t == nil {
		return nil
	}
	c := dupChecker{etcd: etcd}
	if _, _, err := c.level(t.Success, "success"); err != nil {
		return err
	}
	_, _, err := c.level(t.Failure, "failure")
	return err
}

type dupChecker struct{ etcd bool }

// dupSite is where a write sits: the op at index i of the level at path. Its name
// ("success[0] (put \"k\")") is built only for a refusal: the check runs on every
// transaction, nearly all of which it admits.
type dupSite struct {
	path string
	i    int
	op   Op
}

func (s dupSite) String() string { return fmt.Sprintf("%s[%d] (%s)", s.path, s.i, describeOp(s.op)) }

// dupDel is one delete seen: the keys [begin, end) (end nil: no bound), and where.
type dupDel struct {
	begin, end []byte
	at         dupSite
}

func (d dupDel) covers(k string) bool {
	return k >= string(d.begin) && (d.end == nil || k < string(d.end))
}

// level is etcd's checkIntervals for the ops at path: the puts and deletes of the level
// and of its nesting. A level holds at most MaxTxnOps ops, so a linear scan of the
// deletes per put is cheap.
func (c dupChecker) level(ops []Op, path string) (map[string]dupSite, []dupDel, error) {
	var dels []dupDel
	for i, op := range ops {
		at := dupSite{path: path, i: i, op: op}
		switch {
		case op.Type == OpDelete:
			dels = append(dels, dupDel{begin: op.Key, end: append(bytes.Clone(op.Key), 0), at: at})
		case op.Type == OpDeleteRange && len(op.End) > 0:
			dels = append(dels, dupDel{begin: op.Key, end: op.End, at: at})
		case op.Type == OpDeleteRange && !c.etcd:
			dels = append(dels, dupDel{begin: op.Key, at: at})
		}
	}
	puts := map[string]dupSite{} // key -> where it is put
	for i, op := range ops {
		if op.Type != OpTxn || op.Txn == nil {
			continue
		}
		p := fmt.Sprintf("%s[%d]", path, i)
		putsThen, delsThen, err := c.level(op.Txn.Success, p+".success")
		if err != nil {
			return nil, nil, err
		}
		putsElse, delsElse, err := c.level(op.Txn.Failure, p+".failure")
		if err != nil {
			return nil, nil, err
		}
		for _, k := range sortedKeys(putsThen) {
			if err := c.clash(k, putsThen[k], puts, dels); err != nil {
				return nil, nil, err
			}
			puts[k] = putsThen[k]
		}
		for _, k := range sortedKeys(putsElse) {
			if _, both := putsThen[k]; both {
				delete(puts, k) // the other branch of this very transaction: no clash
			}
			if err := c.clash(k, putsElse[k], puts, dels); err != nil {
				return nil, nil, err
			}
			puts[k] = putsElse[k]
		}
		dels = append(append(dels, delsThen...), delsElse...)
	}
	for i, op := range ops {
		if op.Type != OpPut {
			continue
		}
		k, at := string(op.Key), dupSite{path: path, i: i, op: op}
		if err := c.clash(k, at, puts, dels); err != nil {
			return nil, nil, err
		}
		puts[k] = at
	}
	return puts, dels, nil
}

// clash refuses a put of k at where if k is already put or deleted.
func (c dupChecker) clash(k string, where dupSite, puts map[string]dupSite, dels []dupDel) error {
	if other, ok := puts[k]; ok {
		return fmt.Errorf("%w: key %q: %s and %s both write it", ErrDuplicateKey, k, other, where)
	}
	for _, d := range dels {
		if d.covers(k) {
			return fmt.Errorf("%w: key %q: %s and %s both write it", ErrDuplicateKey, k, d.at, where)
		}
	}
	return nil
}

func sortedKeys(m map[string]dupSite) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// describeOp names an op for an error message.
func describeOp(op Op) string {
	switch op.Type {
	case OpPut:
		return fmt.Sprintf("put %q", op.Key)
	case OpDelete:
		return fmt.Sprintf("delete %q", op.Key)
	case OpDeleteRange:
		if len(op.End) == 0 {
			return fmt.Sprintf("delete_range from %q to the end", op.Key)
		}
		return fmt.Sprintf("delete_range [%q, %q)", op.Key, op.End)
	}
	return fmt.Sprintf("op type %d on %q", op.Type, op.Key)
}
