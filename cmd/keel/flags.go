package main

import (
	"os"
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

// secretEnv names every environment variable that holds a secret; each is read by
// secretFlag and by nothing else (TestHelpNeverPrintsASecret sets them all).
var secretEnv = []string{"KEEL_TOKEN"}

// secretFlag registers the string flag name for a secret whose fallback is the
// environment variable env: the flag's value is env's until the flag is given. It is
// the one way a secret becomes a flag. Its default as help shows it is empty, never the
// environment's value: help (`keel agent --help` too: it inherits the root's persistent
// flags) and a usage line after a bad flag print a flag's default, and a secret there
// reaches terminals, CI logs and bug reports. Its String is empty for the same reason.
func secretFlag(fs *pflag.FlagSet, p *string, name, env, usage string) {
	*p = ""
	fs.Var(secretValue{p}, name, usage) // pflag records the default from String(): ""
	*p = os.Getenv(env)
}

// secretValue is a string flag.Value whose String never shows the secret.
type secretValue struct{ p *string }

func (v secretValue) Set(s string) error { *v.p = s; return nil }
func (secretValue) String() string       { return "" }
func (secretValue) Type() string         { return "string" }
