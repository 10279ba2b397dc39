package chaos

import (
	"context"
	"fmt"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// aclArgs returns the agent arguments that keep a harness node open to its tokenless
// clients: `-acl-default allow` for a release with ACLs (whose default outside -dev is
// deny until `keel acl bootstrap`), nothing for an older release, which has no ACLs
// and would refuse the unknown flag (the upgrade test runs both side by side).
func aclArgs(bin string) []string {
	if agentHasFlag(bin, "acl-default") {
		return []string{"-acl-default", "allow"}
	}
	return nil
}

// clusterToken is the ACL token the harness's clients of c send ("" when c runs
// without ACLs).
func clusterToken(c any) string {
	if t, ok := c.(interface{ Token() string }); ok {
		return t.Token()
	}
	return ""
}

// aclBootstrap bootstraps the ACL system through the node at httpAddr and returns the
// management token.
func aclBootstrap(ctx context.Context, httpAddr string) (api.ACLToken, error) {
	cl, err := client.New([]string{httpAddr}, client.Options{MaxRetries: 20, TLS: tlsFor(httpAddr)})
	if err != nil {
		return api.ACLToken{}, err
	}
	defer cl.Close()
	tok, err := cl.ACLBootstrap(ctx)
	if err != nil {
		return api.ACLToken{}, fmt.Errorf("acl bootstrap: %w", err)
	}
	return tok, nil
}

// checkACLEnforced says what is wrong when c runs with ACLs (a harness token) and some
// member answers a tokenless read with anything but 401: the run would then prove
// nothing about ACLs (a node that joined after the bootstrap included).
func checkACLEnforced(ctx context.Context, c Cluster) []string {
	ac, ok := c.(interface{ HTTPAddr(id string) string })
	if clusterToken(c) == "" || !ok {
		return nil
	}
	var problems []string
	for _, id := range c.Members() {
		addr := ac.HTTPAddr(id)
		cl, err := client.New([]string{addr}, client.Options{MaxRetries: -1, TLS: tlsFor(addr)})
		if err != nil {
			return append(problems, err.Error())
		}
		_, err = cl.Get(ctx, finalKey)
		cl.Close()
		if !client.IsUnauthorized(err) {
			problems = append(problems, fmt.Sprintf("acl: node %s answered a read without a token with %v, want 401", id, err))
		}
	}
	return problems
}
