package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/versions"
)

func newSchemaCmd() *cobra.Command {
	sc := &cobra.Command{Use: "schema", Short: "Change a running node's schema"}
	var force bool
	apply := &cobra.Command{
		Use:   "apply FILE",
		Short: "Replace the schema of every node in -addr with FILE, without a restart",
		Long: `Replace the schema of every node listed in -addr with FILE (PUT /v1/agent/schema),
one node after another; SIGHUP makes a node re-read its own -schema file instead.

A new resource is registered at once and served once every alive member has
registered it (until then its requests get 503): apply the file to every node.
A changed preferred version takes effect at once (written as soon as every member
decodes it). A file that does not parse, or that would strand stored objects (a
removed resource that has objects, a changed prefix, a dropped version that objects
use), changes nothing and says why. -force allows removing a resource that has
stored objects: they stay stored but this node no longer serves them.

The file is checked locally first, so a syntax error names FILE:LINE before any node
is asked. Put the same file where each node's -schema points, or a restart goes back
to the old one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if _, err := versions.ParseSchema(args[0], data); err != nil {
				return err
			}
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			for _, addr := range strings.Split(global.addr, ",") {
				if addr = strings.TrimSpace(addr); addr == "" {
					continue
				}
				ch, err := applySchema(ctx, addr, filepath.Base(args[0]), data, force)
				if err != nil {
					cmd.SilenceUsage = true
					return fmt.Errorf("%s: %w", addr, err)
				}
				if structured() {
					if err := printValue(cmd.OutOrStdout(), ch); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: applied %s%s\n", addr, ch.File, describeChange(ch))
			}
			return nil
		},
	}
	apply.Flags().BoolVar(&force, "force", false, "allow removing a resource that has stored objects")
	sc.AddCommand(apply)
	return sc
}

func describeChange(ch *versions.SchemaChange) string {
	var parts []string
	for _, p := range []struct {
		what string
		keys []string
	}{{"added", ch.Added}, {"removed", ch.Removed}, {"preferred", ch.Preferred}, {"changed", ch.Changed}} {
		if len(p.keys) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.keys, ", "))
		}
	}
	if len(parts) == 0 {
		return ": no change"
	}
	return ": " + strings.Join(parts, "; ")
}

// applySchema sends one node the schema file.
func applySchema(ctx context.Context, addr, name string, data []byte, force bool) (*versions.SchemaChange, error) {
	c, err := newClientOf([]string{addr}, client.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	raw, err := c.ApplySchema(ctx, name, data, force)
	if err != nil {
		return nil, err
	}
	var ch versions.SchemaChange
	if err := json.Unmarshal(raw, &ch); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	return &ch, nil
}

// reloadOnSignal calls reload for each value received on sigs (SIGHUP) until ctx
// ends; a failed reload is logged and changes nothing.
func reloadOnSignal(ctx context.Context, sigs <-chan os.Signal, reload func(context.Context) (*versions.SchemaChange, error),
	log hclog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			ch, err := reload(ctx)
			switch {
			case err != nil:
				log.Error("schema reload refused; nothing changed", "error", err)
			case ch == nil: // no schema to reload
			default:
				log.Info("schema reloaded", "file", ch.File, "change", strings.TrimPrefix(describeChange(ch), ": "))
			}
		}
	}
}
