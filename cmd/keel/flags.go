package main

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// normalizeArgs lets operators write Consul-style single-dash long flags
// (`keel agent -data-dir D -bootstrap`) as well as `--data-dir`: an argument "-name" or
// "-name=value" whose name is a long flag of some keel command becomes "--name...".
// Anything else (values, "-", "--", shorthand flags) is left alone.
func normalizeArgs(root *cobra.Command, args []string) []string {
	long := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		collect := func(f *pflag.Flag) { long[f.Name] = true }
		c.Flags().VisitAll(collect)
		c.PersistentFlags().VisitAll(collect)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if long[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
