package kv

import (
	"errors"
	"testing"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// The core operations that do what an HTTP route does (Compact, Members, StateView)
// take that route's rule; a pattern without a rule is refused, never let through
// (kills: a missing rule read as the zero rule, which checks nothing).
func TestRouteRightFailsClosed(t *testing.T) {
	none := acl.NewAuthorizer()
	compact := acl.NewAuthorizer(api.ACLPolicy{Operator: []string{api.RightCompact}})
	for _, c := range []struct {
		az      *acl.Authorizer
		pattern string
		ok      bool
	}{
		{nil, "POST " + api.PathCompact, true}, // ACLs not enforced
		{none, "POST " + api.PathCompact, false},
		{compact, "POST " + api.PathCompact, true},
		{compact, "GET " + api.PathAgentSnapshot, false},
		{compact, "POST /v1/no-such-route", false},
		{compact, "GET " + PathAPIs + "/{group}/{version}/{resource}", false},
	} {
		err := routeRight(c.az, c.pattern)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("%s: %v, want allowed %v", c.pattern, err, c.ok)
		}
	}
}
