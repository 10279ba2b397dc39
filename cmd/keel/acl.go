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
  keel acl bootstrap -secret-file F       the same, its secret written to F (mode 0600)
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
	if t.ExpirationTime != "" {
		fmt.Fprintf(w, "Expires:     %s\n", t.ExpirationTime)
	}
	if t.SecretID != "" {
		fmt.Fprintf(w, "SecretID (shown once, keep it):\n%s\n", t.SecretID)
	}
	return nil
}

func newACLBootstrapCmd() *cobra.Command {
	var secretFile string
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the first management token (works once per cluster; its secret is on the last line, or in -secret-file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSecretFile(cmd, secretFile, func(ctx context.Context, c *client.Client) (api.ACLToken, error) {
				return c.ACLBootstrap(ctx)
			})
		},
	}
	secretFileFlag(cmd, &secretFile)
	return cmd
}

func newACLTokenCreateCmd() *cobra.Command {
	var req api.ACLTokenRequest
	var secretFile string
	cmd := &cobra.Command{
		Use:   "create -policy NAME[,NAME]",
		Short: "Create a token bound to policies (its secret is on the last line, or in -secret-file)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSecretFile(cmd, secretFile, func(ctx context.Context, c *client.Client) (api.ACLToken, error) {
				return c.ACLTokenCreate(ctx, req)
			})
		},
	}
	cmd.Flags().StringSliceVar(&req.Policies, "policy", nil, "policy names (comma-separated or repeated)")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the token is for")
	cmd.Flags().StringVar(&req.ExpirationTTL, "ttl", "", "how long the token works, e.g. 30m or 24h (default: until deleted)")
	secretFileFlag(cmd, &secretFile)
	return cmd
}

// secretFileFlag adds -secret-file (-o is the output format of every command).
func secretFileFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "secret-file", "", "write the secret to this new file (mode 0600; an existing file is refused) "+
		"instead of printing it")
}

// withSecretFile runs create, which mints a token, and prints it; with a secret file
// the secret goes there instead. The file is created (0600, exclusively) before the
// token is minted, so a path that cannot be written fails before a secret exists that
// would be shown nowhere.
func withSecretFile(cmd *cobra.Command, path string, create func(context.Context, *client.Client) (api.ACLToken, error)) error {
	var f *os.File
	if path != "" {
		var err error
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return fmt.Errorf("secret file: %w", err)
		}
		defer f.Close()
	}
	return withClient(cmd, func(ctx context.Context, c *client.Client) error {
		t, err := create(ctx, c)
		if err != nil {
			if f != nil {
				f.Close()
				os.Remove(path)
			}
			return err
		}
		if f != nil {
			if err := writeSecret(f, t.SecretID); err != nil {
				return fmt.Errorf("secret file %s: %w (the token's accessor is %s: delete it and create another)", path, err, t.AccessorID)
			}
			t.SecretID = ""
			fmt.Fprintf(cmd.ErrOrStderr(), "secret written to %s\n", path)
		}
		return printToken(cmd.OutOrStdout(), t)
	})
}

// writeSecret writes secret and a newline to f, synced, and closes it.
func writeSecret(f *os.File, secret string) error {
	if _, err := f.WriteString(secret + "\n"); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
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
