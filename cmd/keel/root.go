package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv/client"
)

// globalFlags are shared by every client subcommand.
type globalFlags struct {
	addr string
	// caFile, certFile and keyFile reach HTTPS nodes (env KEEL_CA_FILE, ...).
	caFile, certFile, keyFile string
	timeout                   time.Duration
	output                    string
	token                     string
}

var global globalFlags

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "keel",
		Short:         "keel: a Raft-replicated MVCC key-value store for small HA control planes",
		Version:       buildinfo.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	defAddr := os.Getenv("KEEL_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:7370"
	}
	pf.StringVar(&global.addr, "addr", defAddr, "HTTP address(es) of keel nodes, comma-separated, host:port or https://host:port (env KEEL_ADDR)")
	pf.StringVar(&global.caFile, "ca-file", os.Getenv("KEEL_CA_FILE"), "CA certificate that signed the nodes' certificates; turns on https (env KEEL_CA_FILE)")
	pf.StringVar(&global.certFile, "cert-file", os.Getenv("KEEL_CERT_FILE"), "client certificate, when the nodes verify clients (env KEEL_CERT_FILE)")
	pf.StringVar(&global.keyFile, "key-file", os.Getenv("KEEL_KEY_FILE"), "key of -cert-file (env KEEL_KEY_FILE)")
	pf.DurationVar(&global.timeout, "timeout", 30*time.Second, "deadline for one command")
	pf.StringVarP(&global.output, "output", "o", "text", "output format: text, json or yaml")
	secretFlag(pf, &global.token, "token", "KEEL_TOKEN", "ACL token secret sent with every request (env KEEL_TOKEN)")
	root.AddCommand(newAgentCmd(), newGetCmd(), newPutCmd(), newDelCmd(), newTxnCmd(),
		newCompactCmd(), newStatusCmd(), newWatchCmd(), newDevCmd(), newTopCmd(), newLeaseCmd(), newLockCmd())
	root.AddCommand(newLeaveCmd(), newMembersCmd(), newRemovePeerCmd(), newTransferLeaderCmd(), newRebuildCmd(),
		newSnapshotCmd(), newVersionsCmd(), newMigrateCmd(), newKeyMigrateCmd(), newUpgradeCmd(), newVersionCmd(), newSchemaCmd(), newTLSCmd(), newACLCmd(), newDocsCmd(), newHealthCmd())
	return root
}

// newClient builds a client for -addr.
func newClient() (*client.Client, error) {
	var addrs []string
	for _, a := range strings.Split(global.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return newClientOf(addrs, client.Options{})
}

// newClientOf builds a client for addrs with o plus the global -ca-file, -cert-file,
// -key-file and -token (and their environment variables). Every command that talks to
// a node builds its client here (or through newClient / withClient), so that it works
// on a secured cluster (TestEveryCommandHonoursTLSAndToken).
func newClientOf(addrs []string, o client.Options) (*client.Client, error) {
	tlsCfg, err := clientTLS()
	if err != nil {
		return nil, err
	}
	o.TLS, o.Token = tlsCfg, global.token
	if o.NoLeaderBudget == 0 {
		o.NoLeaderBudget = cliNoLeaderBudget
	}
	return client.New(addrs, o)
}

// cliNoLeaderBudget is how long a command goes on once a node answered 503 NoLeader:
// the server's Retry-After (kv.Config.RetryAfter, 1 s). One more try then rides out
// an election that is ending; a cluster without quorum fails in about 2 s, not after
// every retry (12.9 s, issue #38).
const cliNoLeaderBudget = time.Second

// withTimeout is the context of one client command.
func withTimeout(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, global.timeout)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exitCode maps an error to the process exit status: 1 for a failed request or bad
// usage, 2 when the key was not found (like `grep`'s "no match"), 3 for a CAS conflict.
func exitCode(err error) int {
	switch {
	case client.IsNotFound(err):
		return 2
	case client.IsConflict(err):
		return 3
	}
	return 1
}

// withClient runs f with a client of -addr and a context bounded by -timeout.
func withClient(cmd *cobra.Command, f func(ctx context.Context, c *client.Client) error) error {
	c, err := newClient()
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(cmd)
	defer cancel()
	return f(ctx, c)
}
