package kv

import (
	"fmt"
	"unicode/utf8"

	"github.com/keel-kv/keel/fsm"
)

// limits are the input bounds every request is checked against before anything is
// proposed or read.
type limits struct {
	maxKeyBytes     int
	maxValueBytes   int64
	maxTxnBodyBytes int64
	maxListLimit    int
}

func (c Config) limits() limits {
	return limits{maxKeyBytes: c.MaxKeyBytes, maxValueBytes: c.MaxValueBytes,
		maxTxnBodyBytes: c.MaxTxnBodyBytes, maxListLimit: c.MaxListLimit}
}

// checkListLimit accepts a limit on the keys one read answers — a list's page, a
// ranged get's — in [0, maxListLimit] (0: no limit; ErrInvalidParam otherwise).
func (l limits) checkListLimit(n int64) error {
	if n < 0 || n > int64(l.maxListLimit) {
		return fmt.Errorf("%w: limit %d must be in [0, %d]", ErrInvalidParam, n, l.maxListLimit)
	}
	return nil
}

// checkTxnBody accepts a transaction's JSON body of at most maxTxnBodyBytes bytes
// (ErrTooLarge). The message leaves out the size: a door that stops reading a body at
// the limit does not know it, and every door answers in the same words.
func (l limits) checkTxnBody(size int64) error {
	if size > l.maxTxnBodyBytes {
		return fmt.Errorf("%w: txn body is more than the maximum %d bytes", ErrTooLarge, l.maxTxnBodyBytes)
	}
	return nil
}

// checkKey accepts non-empty UTF-8 keys of at most maxKeyBytes bytes.
func (l limits) checkKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > l.maxKeyBytes:
		return fmt.Errorf("%w: key is %d bytes, more than the maximum %d", ErrInvalidKey, len(key), l.maxKeyBytes)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidKey)
	}
	return nil
}

// checkTxn holds a finished transaction, nested ones included, to the limits every
// door's validation (CheckOp, CheckCompare; the HTTP and stream decoders) already
// applied: keys non-empty, UTF-8 and bounded, range ends bounded, values bounded. The
// core runs it before every KV transaction it proposes, so a door that forgets a check
// still writes nothing the others refuse.
func (l limits) checkTxn(txn *fsm.Txn) error {
	for _, c := range txn.Compares {
		if err := l.checkEnds(c.Key, c.End); err != nil {
			return err
		}
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if err := l.checkFsmOp(op); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFsmOp is checkTxn for one op.
func (l limits) checkFsmOp(op fsm.Op) error {
	if op.Type == fsm.OpTxn && op.Txn != nil {
		return l.checkTxn(op.Txn)
	}
	if err := l.checkEnds(op.Key, op.End); err != nil {
		return err
	}
	return l.checkValue(len(op.Value))
}

// checkEnds checks a key and its range end, if any.
func (l limits) checkEnds(key, end []byte) error {
	if err := l.checkKey(string(key)); err != nil {
		return err
	}
	if len(end) > l.maxKeyBytes {
		return fmt.Errorf("%w: range end is %d bytes, more than the maximum %d", ErrInvalidKey, len(end), l.maxKeyBytes)
	}
	return nil
}

// checkValue accepts values of at most maxValueBytes bytes.
func (l limits) checkValue(n int) error {
	if int64(n) > l.maxValueBytes {
		return fmt.Errorf("%w: value is %d bytes, more than the maximum %d", ErrTooLarge, n, l.maxValueBytes)
	}
	return nil
}
