package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

func newACLCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "acl",
		Short: "Access control: bootstrap, tokens and policies",
		Long: `Access control. A token (sent as -token or KEEL_TOKEN) is bound to policies; a
policy grants read or write on key prefixes and typed resources, and operator rights.

  keel acl bootstrap                      first management token (once per cluster)
  keel acl policy put -f app.json         create or replace a policy
  keel acl token create -policy app       a token bound to it`,
	}
	policy := &cobra.Command{Use: "policy", Short: "Create, show, list and delete policies"}
	policy.AddCommand(newACLPolicyPutCmd(), newACLPolicyGetCmd(), newACLPolicyListCmd(), newACLPolicyDeleteCmd())
	token := &cobra.Command{Use: "token", Short: "Create, list and delete tokens"}
	token.AddCommand(newACLTokenCreateCmd(), newACLTokenListCmd(), newACLTokenDeleteCmd(), newACLTokenSelfCmd())
	cmd.AddCommand(newACLBootstrapCmd(), policy, token)
	return cmd
}

// printToken prints a token; a secret, when there is one, goes alone on the last line
// so that scripts can take it with tail -n 1.
func printToken(w io.Writer, t api.ACLToken) error {
	if structured() {
		return printValue(w, t)
	}
	fmt.Fprintf(w, "AccessorID:  %s\nPolicies:    %s\nCreated:     %s\n", t.AccessorID, strings.Join(t.Policies, ","), t.CreateTime)
	if t.Description != "" {
		fmt.Fprintf(w, "Description: %s\n", t.Description)
	}
	if t.SecretID != "" {
		fmt.Fprintf(w, "SecretID (shown once, keep it):\n%s\n", t.SecretID)
	}
	return nil
}

func newACLBootstrapCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the first management token (works once per cluster; its secret is on the last line)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				t, err := c.ACLBootstrap(ctx)
				if err != nil {
					return err
				}
				return printToken(cmd.OutOrStdout(), t)
			})
		},
	}
}

func newACLTokenCreateCmd() *cobra.Command {
	var req api.ACLTokenRequest
	cmd := &cobra.Command{
		Use:   "create -policy NAME[,NAME]",
		Short: "Create a token bound to policies (its secret is on the last line)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				t, err := c.ACLTokenCreate(ctx, req)
				if err != nil {
					return err
				}
				return printToken(cmd.OutOrStdout(), t)
			})
		},
	}
	cmd.Flags().StringSliceVar(&req.Policies, "policy", nil, "policy names (comma-separated or repeated)")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	return cmd
}

func newACLTokenListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List tokens (accessor IDs and policies; secrets are never shown again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				toks, err := c.ACLTokenList(ctx)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), toks)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ACCESSOR ID\tPOLICIES\tCREATED\tDESCRIPTION")
				for _, t := range toks {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.AccessorID, strings.Join(t.Policies, ","), t.CreateTime, t.Description)
				}
				return tw.Flush()
			})
		},
	}
}

func newACLTokenSelfCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "self",
		Short: "Describe the token given by -token / KEEL_TOKEN",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				t, err := c.ACLTokenSelf(ctx)
				if err != nil {
					return err
				}
				return printToken(cmd.OutOrStdout(), t)
			})
		},
	}
}

func newACLTokenDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ACCESSOR_ID",
		Short: "Delete a token: requests with it fail with 401 from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.ACLTokenDelete(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted token %s\n", args[0])
				return nil
			})
		},
	}
}

func newACLPolicyPutCmd() *cobra.Command {
	var file, name string
	var read, write, operator []string
	cmd := &cobra.Command{
		Use:   "put NAME [-read PREFIX] [-write PREFIX] [-operator RIGHT] | put -f FILE",
		Short: "Create or replace a policy, from flags or a JSON file (- = stdin)",
		Long: `Create or replace a policy.

  keel acl policy put app -write app/ -read config/
  keel acl policy put -f policy.json
      {"name":"app","keys":[{"prefix":"app/","access":"write"}],
       "resources":[{"group":"example.com","resource":"widgets","access":"read"}],
       "operator":["snapshot"]}

Operator rights: ` + strings.Join(api.OperatorRights, ", ") + `, or * for all.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p api.ACLPolicy
			if file != "" {
				in := cmd.InOrStdin()
				if file != "-" {
					f, err := os.Open(file)
					if err != nil {
						return err
					}
					defer f.Close()
					in = f
				}
				dec := json.NewDecoder(in)
				dec.DisallowUnknownFields()
				if err := dec.Decode(&p); err != nil {
					return fmt.Errorf("policy %s: %w", file, err)
				}
			}
			if len(args) == 1 {
				name = args[0]
			}
			if name != "" {
				p.Name = name
			}
			if p.Name == "" {
				return fmt.Errorf("policy: a name is required (argument or \"name\" in the file)")
			}
			for _, k := range read {
				p.Keys = append(p.Keys, api.ACLKeyRule{Prefix: k, Access: api.AccessRead})
			}
			for _, k := range write {
				p.Keys = append(p.Keys, api.ACLKeyRule{Prefix: k, Access: api.AccessWrite})
			}
			p.Operator = append(p.Operator, operator...)
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				out, err := c.ACLPolicyPut(ctx, p)
				if err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), out)
			})
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "policy JSON file, - for stdin")
	cmd.Flags().StringArrayVar(&read, "read", nil, "key prefix the policy may read (repeatable; \"\" = every key)")
	cmd.Flags().StringArrayVar(&write, "write", nil, "key prefix the policy may read and write (repeatable)")
	cmd.Flags().StringSliceVar(&operator, "operator", nil, "operator rights (comma-separated): "+strings.Join(api.OperatorRights, ", ")+", or *")
	return cmd
}

func newACLPolicyGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				p, err := c.ACLPolicyGet(ctx, args[0])
				if err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), p)
			})
		},
	}
}

func newACLPolicyListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List policies",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				ps, err := c.ACLPolicyList(ctx)
				if err != nil {
					return err
				}
				return printValue(cmd.OutOrStdout(), ps)
			})
		},
	}
}

func newACLPolicyDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a policy: its tokens lose its rights at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.ACLPolicyDelete(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted policy %s\n", args[0])
				return nil
			})
		},
	}
}
