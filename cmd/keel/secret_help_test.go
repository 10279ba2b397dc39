package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpNeverPrintsASecret: with every secret the CLI reads from the environment set
// (KEEL_TOKEN), the help of every command — `keel agent --help` included, which
// inherits the root's persistent flags — and its usage line on a bad flag show none of
// them, as a flag's default or anywhere else. The secret still works as the fallback of
// -token. Kills: a secret flag registered with the environment's value as its default.
func TestHelpNeverPrintsASecret(t *testing.T) {
	const secret = "keel_s3cr3t-from-the-environment"
	for _, env := range secretEnv {
		t.Setenv(env, secret)
	}
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(newCLI(), nil)
	if len(paths) < 20 {
		t.Fatalf("walked only %d commands", len(paths))
	}
	for _, p := range paths {
		for _, tail := range [][]string{{"--help"}, {"--no-such-flag"}} {
			args := append(append([]string(nil), p...), tail...)
			out, err := runCLI(t, args...)
			if strings.Contains(out, secret) || (err != nil && strings.Contains(err.Error(), secret)) {
				t.Errorf("keel %s prints the secret of the environment:\n%s", strings.Join(args, " "), out)
			}
		}
	}
	// The environment is still the fallback of -token, and -token still wins over it.
	runCLI(t, "version")
	if global.token != secret {
		t.Fatalf("-token from KEEL_TOKEN = %q, want the environment's secret", global.token)
	}
	runCLI(t, "version", "-token", "other")
	if global.token != "other" {
		t.Fatalf("-token given = %q, want it over KEEL_TOKEN", global.token)
	}
}
