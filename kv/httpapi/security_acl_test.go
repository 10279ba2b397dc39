package httpapi

import (
	"net/http"
	"testing"

	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// TestACLNoEscalation: a token with the acl right manages only rights it holds, and
// nobody changes the management policy.
//
//	aclop: keys app/ write, operator acl
//	within: policy "small" (app/x read), a token of "small"
//	beyond: policy keys "" read, policy operator "*" or snapshot, its own policy
//	        widened, a token of global-management, deleting root's token
//	nobody: PUT or DELETE global-management (root included)
func TestACLNoEscalation(t *testing.T) {
	as := newACLServer(t)
	as.policy(api.ACLPolicy{Name: "aclop", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}},
		Operator: []string{api.RightACL}})
	aclop := as.token("aclop")

	putPolicy := func(secret string, p api.ACLPolicy) int {
		code, _ := as.doAs(secret, http.MethodPut, api.PathACLPolicies+"/"+p.Name, mustJSON(p))
		return code
	}
	small := api.ACLPolicy{Name: "small", Keys: []api.ACLKeyRule{{Prefix: "app/x", Access: api.AccessRead}}}
	if code := putPolicy(aclop, small); code != http.StatusOK {
		t.Fatalf("policy within the token's rights = %d, want 200", code)
	}
	for i, p := range []api.ACLPolicy{
		{Name: "everything", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessRead}}},
		{Name: "write-x", Keys: []api.ACLKeyRule{{Prefix: "other/", Access: api.AccessWrite}}},
		{Name: "ops", Operator: []string{api.RightAll}},
		{Name: "snap", Operator: []string{api.RightSnapshot}},
		{Name: "res", Resources: []api.ACLResourceRule{{Group: "*", Resource: "*", Access: api.AccessRead}}},
		{Name: "aclop", Keys: []api.ACLKeyRule{{Prefix: "", Access: api.AccessWrite}}, Operator: []string{api.RightACL}},
	} {
		if code := putPolicy(aclop, p); code != http.StatusForbidden {
			t.Errorf("#%d: policy %q beyond the token's rights = %d, want 403", i, p.Name, code)
		}
	}
	mint := func(policy string) int {
		code, _ := as.doAs(aclop, http.MethodPost, api.PathACLTokens, mustJSON(api.ACLTokenRequest{Policies: []string{policy}}))
		return code
	}
	if code := mint(api.ManagementPolicy); code != http.StatusForbidden {
		t.Errorf("token of %s minted by aclop = %d, want 403", api.ManagementPolicy, code)
	}
	if code := mint("small"); code != http.StatusOK {
		t.Errorf("token of small minted by aclop = %d, want 200", code)
	}
	var self api.ACLToken
	as.mustAs(as.root, http.MethodGet, api.PathACLTokenSelf, nil, http.StatusOK, &self)
	if code, b := as.doAs(aclop, http.MethodDelete, api.PathACLTokens+"/"+self.AccessorID, nil); code != http.StatusForbidden {
		t.Errorf("aclop deleting root's token = %d %s, want 403", code, b)
	}

	widened := acl.ManagementPolicy()
	widened.Description = "rewritten"
	for _, secret := range []string{aclop, as.root} {
		if code := putPolicy(secret, widened); code == http.StatusOK {
			t.Errorf("PUT %s = 200, want it refused", api.ManagementPolicy)
		}
		if code, _ := as.doAs(secret, http.MethodDelete, api.PathACLPolicies+"/"+api.ManagementPolicy, nil); code == http.StatusOK {
			t.Errorf("DELETE %s = 200, want it refused", api.ManagementPolicy)
		}
	}
	var p api.ACLPolicy
	as.mustAs(as.root, http.MethodGet, api.PathACLPolicies+"/"+api.ManagementPolicy, nil, http.StatusOK, &p)
	if p.Description == "rewritten" {
		t.Errorf("%s was rewritten", api.ManagementPolicy)
	}
	// Root still manages everything.
	if code := putPolicy(as.root, api.ACLPolicy{Name: "ops", Operator: []string{api.RightAll}}); code != http.StatusOK {
		t.Errorf("root writing a policy of every right = %d, want 200", code)
	}
}
