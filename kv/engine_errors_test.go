package kv

import (
	"fmt"
	"testing"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/ctoken"
)

// TestEngineErrorsKeepTheirAnswers: the errors the ACL engine (kv/acl) and the token
// codec (kv/internal/ctoken) return reach a client exactly as they did when both lived
// in kv — same status, reason and message (kills: an engine sentinel that is not the
// value kv's error table matches, or a message that lost its "kv: …" prefix).
func TestEngineErrorsKeepTheirAnswers(t *testing.T) {
	if ErrForbidden != acl.ErrForbidden || ErrUnauthorized != acl.ErrUnauthorized || ErrInvalidContinueToken != ctoken.ErrInvalid {
		t.Fatal("kv's ACL and token sentinels are not the engines' values")
	}
	_, badToken := ctoken.NewCodec([]byte("s")).Decode("!")
	grant := acl.NewAuthorizer().CheckGrant("create the token", acl.ManagementPolicy())
	tests := []struct {
		err     error
		code    int
		reason  string
		message string
	}{
		{acl.ForbiddenKey([]byte("b/x"), true), 403, api.ReasonForbidden,
			`kv: forbidden: the token has no write right on key "b/x"`},
		{acl.ForbiddenRange([]byte("a"), []byte("b"), false), 403, api.ReasonForbidden,
			`kv: forbidden: the token has no read right on every key of ["a", "b")`},
		{acl.ForbiddenRight(api.RightCompact), 403, api.ReasonForbidden,
			`kv: forbidden: the token lacks the operator right "compact"`},
		{acl.ForbiddenResource("apps", "widgets", false), 403, api.ReasonForbidden,
			`kv: forbidden: the token has no read right on resource apps/widgets`},
		{grant, 403, api.ReasonForbidden, `kv: forbidden: cannot create the token: policy "` + api.ManagementPolicy +
			`" grants write on keys "", which the calling token does not hold (a token manages only rights it has)`},
		{validatePolicy(api.ACLPolicy{Name: "p", Operator: []string{"root"}}), 400, api.ReasonBadRequest,
			`kv: invalid request body: operator right "root": want one of ` + fmt.Sprint(api.OperatorRights) + ` or "*"`},
		{checkPolicyWritable(api.ManagementPolicy), 400, api.ReasonBadRequest, `acl policy: kv: invalid request body: "` +
			api.ManagementPolicy + `" is built in and cannot be changed or deleted, so that a management token always holds every right`},
		{badToken, 400, api.ReasonInvalidContinueToken, `kv: invalid continue token: not base64url`},
	}
	for i, tt := range tests {
		b := WireError(tt.err, false)
		if b.Code != tt.code || b.Reason != tt.reason || b.Message != tt.message {
			t.Errorf("#%d: %d %s %q,\nwant %d %s %q", i, b.Code, b.Reason, b.Message, tt.code, tt.reason, tt.message)
		}
	}
}
