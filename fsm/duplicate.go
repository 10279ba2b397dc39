package fsm

import (
	"bytes"
	"fmt"
)

// CheckDuplicateKeys refuses, with ErrDuplicateKey, a transaction in which one branch
// writes a key twice: two puts of one key, or a put of a key that a delete or a
// delete_range of the same branch also covers, in either order. It is etcd's rule
// (v3rpc checkIntervals, "duplicate key given in txn request"): reads are free, and
// deletes may overlap each other, since deleting a key twice deletes it once. Each
// branch is checked on its own, because Success and Failure never both run.
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
// The state machine does not call it when it applies a command, on purpose. Releases
// before this check applied such transactions (the last write of a key wins, at one
// revision), and those entries can still be in a log or be proposed by an older node
// during a rolling upgrade; every replica must apply every entry the same way whatever
// its release, so refusing them at apply would split replicas and change history on
// replay. The rule is enforced where requests enter (package kv), before anything is
// proposed; see Store.txnLocked.
func CheckDuplicateKeys(t *Txn) error {
	if t == nil {
		return nil
	}
	if err := checkBranch(t.Success, "success"); err != nil {
		return err
	}
	return checkBranch(t.Failure, "failure")
}

// checkBranch applies CheckDuplicateKeys to one branch. A branch holds at most
// MaxTxnOps ops, so comparing every put with every other write is cheap.
func checkBranch(ops []Op, branch string) error {
	for i, p := range ops {
		if p.Type != OpPut {
			continue
		}
		for j, w := range ops {
			if j == i {
				continue
			}
			clash := false
			switch w.Type {
			case OpPut:
				clash = j < i && bytes.Equal(w.Key, p.Key) // report each pair once
			case OpDelete:
				clash = bytes.Equal(w.Key, p.Key)
			case OpDeleteRange:
				clash = bytes.Compare(p.Key, w.Key) >= 0 && (len(w.End) == 0 || bytes.Compare(p.Key, w.End) < 0)
			}
			if clash {
				first, second := min(i, j), max(i, j)
				return fmt.Errorf("%w: key %q: %s[%d] (%s) and %s[%d] (%s) both write it",
					ErrDuplicateKey, p.Key, branch, first, describeOp(ops[first]), branch, second, describeOp(ops[second]))
			}
		}
	}
	return nil
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
