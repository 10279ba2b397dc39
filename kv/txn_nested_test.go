package kv

import (
	"context"
	"errors"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// nestTxn wraps op in a transaction nested twice, in the failure branch of the inner
// one, behind an allowed op: the checks must walk every branch at every depth.
func nestTxn(op fsm.Op) *fsm.Txn {
	inner := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpGet, Key: []byte("a/x")}}, Failure: []fsm.Op{op}}
	mid := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpTxn, Txn: inner}}}
	return &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("a/y"), Value: []byte{}},
		{Type: fsm.OpTxn, Txn: mid}}}
}

// The one check of a transaction (Server.checkTxn, which the HTTP door, the etcd door
// and the leader's check of a forwarded transaction share) walks nested transactions:
// a put outside the token's rights, a ranged compare over keys it may not read, or a
// write under a reserved prefix, nested anywhere, is refused (kills: checkTxnAccess or
// checkReservedWrites walking only the outer ops; compares checking only their key).
func TestCheckTxnNested(t *testing.T) {
	s := &Server{}
	az := acl.NewAuthorizer(api.ACLPolicy{Keys: []api.ACLKeyRule{{Prefix: "a/", Access: api.AccessWrite}}})
	if err := s.checkTxn(context.Background(), az, nestTxn(fsm.Op{Type: fsm.OpPut, Key: []byte("a/z"), Value: []byte{}})); err != nil {
		t.Fatalf("a nested put within the token's rights: %v", err)
	}
	for name, txn := range map[string]*fsm.Txn{
		"nested put":    nestTxn(fsm.Op{Type: fsm.OpPut, Key: []byte("b/z"), Value: []byte{}}),
		"nested get":    nestTxn(fsm.Op{Type: fsm.OpGet, Key: []byte("b/z")}),
		"nested delete": nestTxn(fsm.Op{Type: fsm.OpDeleteRange, Key: []byte("a/"), End: []byte("c")}),
		"nested compare": nestTxn(fsm.Op{Type: fsm.OpTxn, Txn: &fsm.Txn{
			Compares: []fsm.Compare{{Key: []byte("a/"), End: []byte("b0"), Target: fsm.TargetVersion}}}}),
		"ranged compare": {Compares: []fsm.Compare{{Key: []byte("a/"), End: []byte{}, Target: fsm.TargetLease}}},
	} {
		if err := s.checkTxn(context.Background(), az, txn); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", name, err)
		}
	}
	reserved := nestTxn(fsm.Op{Type: fsm.OpPut, Key: []byte(versions.SystemPrefix + "x"), Value: []byte{}})
	if err := s.checkTxn(context.Background(), nil, reserved); !errors.Is(err, ErrReservedPrefix) {
		t.Fatalf("a nested put under %q: %v, want ErrReservedPrefix", versions.SystemPrefix, err)
	}
}
