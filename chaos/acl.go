package chaos

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
