package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/client"
)

func newHealthCmd() *cobra.Command {
	var ready bool
	cmd := &cobra.Command{
		Use:   "health [--ready]",
		Short: "Exit 0 if the node at -addr is live (--ready: ready to serve), 1 if not: for health checks",
		Long: `Ask the first node of -addr, once and without retrying, whether it is live (GET /livez:
the process serves HTTP) or, with --ready, ready (GET /readyz: a leader is known, the
cluster secret is replicated, the node decodes what is stored). Exit status 0 when it
is, 1 with the reason when not. It needs no shell and no curl, so a FROM-scratch
container's HEALTHCHECK runs it:

  HEALTHCHECK CMD ["/keel", "health", "-timeout", "5s"]

It uses the -ca-file, -cert-file and -key-file of every command (KEEL_CA_FILE, ...), so
it reaches a node with TLS and client verification; no token is needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addrs := strings.Split(global.addr, ",")
			c, err := newClientOf(addrs[:1], client.Options{MaxRetries: -1})
			if err != nil {
				return err
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			body, err := c.Health(ctx, ready)
			if err != nil {
				return fmt.Errorf("health of %s: %w", strings.TrimSpace(addrs[0]), err)
			}
			if ready {
				fmt.Fprint(cmd.OutOrStdout(), body)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "live")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "ask whether the node is ready to serve (/readyz), not only live")
	return cmd
}
