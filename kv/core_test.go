package kv

import (
	"context"
	"errors"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// The core's operator operations each need their right, for every door: a caller
// without it is refused before anything is read or written (kills: a check dropped
// from one of them, or the wrong right asked).
func TestOperatorRights(t *testing.T) {
	s, err := NewServer(DefaultConfig(), kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ops := map[string]func(Caller) error{
		api.RightCompact:    func(c Caller) error { _, err := s.Compact(ctx, c, 1); return err },
		api.RightMembers:    func(c Caller) error { _, _, err := s.Members(ctx, c); return err },
		api.RightSnapshot:   func(c Caller) error { _, err := s.StateView(ctx, c); return err },
		api.RightACL:        func(c Caller) error { _, err := s.ACLTokens(ctx, c); return err },
		api.RightPeers:      func(c Caller) error { return s.RemoveMember(ctx, c, "n9") },
		api.RightLeadership: func(c Caller) error { return s.TransferLeadership(ctx, c, "n9") },
	}
	for right, op := range ops {
		for other := range ops {
			c := Caller{az: acl.NewAuthorizer(api.ACLPolicy{Operator: []string{other}})}
			err := op(c)
			if refused := errors.Is(err, ErrForbidden); refused == (other == right) {
				t.Errorf("%s with only the %s right: %v", right, other, err)
			}
		}
		if err := op(Caller{az: acl.NewAuthorizer()}); !errors.Is(err, ErrForbidden) {
			t.Errorf("%s with no right: %v, want ErrForbidden", right, err)
		}
	}
}

// The duplicate-key rule is chosen in one place (TxnOptions.checkDuplicates) for every
// write: keel's (fsm.CheckDuplicateKeys) by default, for the KV API's transactions and
// the node's own (ACL records, typed resources, through apply), etcd's on the
// transaction as etcd sees it for the etcd door. Each refusal proposes nothing
// (kills: a path that skips the check, or checks the wrong rule or the wrong view).
func TestTxnDuplicateRule(t *testing.T) {
	store := kvtest.New()
	s, err := NewServer(DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) fsm.Op { return fsm.Op{Type: fsm.OpPut, Key: []byte(k), Value: []byte("v")} }
	twice := &fsm.Txn{Success: []fsm.Op{put("a"), put("a")}}
	// A delete to the keyspace's end beside a put: keel's rule refuses it, etcd's
	// (its checkIntervals quirk) lets it through.
	toEnd := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpDeleteRange, Key: []byte("b"), End: []byte{}}, put("c")}}
	etcd := TxnOptions{EtcdDuplicates: true}
	for _, c := range []struct {
		name string
		opts TxnOptions
		txn  *fsm.Txn
		dup  bool
	}{
		{"keel: a key put twice", TxnOptions{}, twice, true},
		{"keel: a put in a delete to the end", TxnOptions{}, toEnd, true},
		{"etcd: a key put twice", etcd, twice, true},
		{"etcd: a put beside a delete to the end", etcd, toEnd, false},
		{"etcd: the view, not the txn", TxnOptions{EtcdDuplicates: true, DuplicateView: twice},
			&fsm.Txn{Success: []fsm.Op{put("d")}}, true},
	} {
		if err := c.opts.checkDuplicates(c.txn); errors.Is(err, fsm.ErrDuplicateKey) != c.dup {
			t.Errorf("%s: checkDuplicates = %v, want duplicate %v", c.name, err, c.dup)
		}
		before := store.FSM().Revision()
		_, err := s.Txn(context.Background(), Caller{}, c.txn, c.opts)
		if errors.Is(err, fsm.ErrDuplicateKey) != c.dup {
			t.Errorf("%s: Txn = %v, want duplicate %v", c.name, err, c.dup)
		}
		if after := store.FSM().Revision(); c.dup && after != before {
			t.Errorf("%s: refused, but the revision moved %d → %d", c.name, before, after)
		}
	}
	if _, err := s.apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: twice}); !errors.Is(err, fsm.ErrDuplicateKey) {
		t.Errorf("apply of the node's own txn putting a key twice = %v, want ErrDuplicateKey", err)
	}
}

// TestDeleteGuards: the core's Delete, for every door, refuses a guard on mod revision
// 0 or below 1 (a key that is absent cannot be deleted) and a guard on a prefix delete
// (a range has no one mod revision), ErrInvalidParam, and deletes nothing; prev < 0
// is no guard.
func TestDeleteGuards(t *testing.T) {
	store := kvtest.New()
	s, err := NewServer(DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rev, err := s.Put(ctx, Caller{}, "a/x", []byte("v"), -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, tt := range []struct {
		prefix bool
		prev   int64
	}{
		{false, 0},
		{true, 0},
		{true, rev},
	} {
		if _, err := s.Delete(ctx, Caller{}, "a/", tt.prefix, tt.prev); !errors.Is(err, ErrInvalidParam) {
			t.Errorf("#%d: Delete(prefix %v, prev %d) = %v, want ErrInvalidParam", i, tt.prefix, tt.prev, err)
		}
	}
	if _, err := s.Delete(ctx, Caller{}, "a/x", false, 0); !errors.Is(err, ErrInvalidParam) {
		t.Errorf("Delete(a/x, prev 0) = %v, want ErrInvalidParam", err)
	}
	if store.FSM().Revision() != rev {
		t.Fatalf("refused deletes moved the revision %d → %d", rev, store.FSM().Revision())
	}
	if r, err := s.Delete(ctx, Caller{}, "a/", true, -1); err != nil || r.Deleted != 1 {
		t.Errorf("Delete(a/, prefix, no guard) = %+v, %v; want 1 deleted", r, err)
	}
}
