package kv

import (
	"context"
	"errors"
	"testing"

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
		api.RightCompact:  func(c Caller) error { _, err := s.Compact(ctx, c, 1); return err },
		api.RightMembers:  func(c Caller) error { _, _, err := s.Members(ctx, c); return err },
		api.RightSnapshot: func(c Caller) error { _, err := s.StateView(ctx, c); return err },
		api.RightACL:      func(c Caller) error { _, err := s.ACLTokens(ctx, c); return err },
		api.RightPeers:    func(c Caller) error { return s.RemoveMember(ctx, c, "n9") },
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
