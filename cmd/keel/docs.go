package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/keel-kv/keel/internal/buildinfo"
)

func newDocsCmd() *cobra.Command {
	dc := &cobra.Command{Use: "docs", Short: "Write keel's documentation from its command tree (man pages)"}
	man := &cobra.Command{
		Use:   "man DIR",
		Short: "Write a man page (section 1) per command into DIR: keel.1, keel-get.1, ...",
		Long: `Write a man page (section 1) per command into DIR (created if missing): keel.1,
keel-get.1, keel-keymigrate-advance.1, ... — the same text as --help, from the same
command tree. Install them with, for example:

  keel docs man /usr/local/share/man/man1 && mandb

The defaults shown are keel's own: the KEEL_* environment variables are ignored while
the pages are written. SOURCE_DATE_EPOCH sets the date in their footer.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("docs man: %w", err)
			}
			root := pristineCLI()
			header := &doc.GenManHeader{Title: "KEEL", Section: "1", Source: "keel " + buildinfo.Version(),
				Manual: "keel manual"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("docs man: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "man pages written to %s (man -l %s/keel.1)\n", args[0], args[0])
			return nil
		},
	}
	dc.AddCommand(man)
	return dc
}

// pristineCLI is the command tree with the defaults of no environment: the KEEL_*
// variables that set flag defaults (an address, certificate paths) are unset while the
// tree is built (defaults are read then) and set back after, so that written
// documentation shows keel's defaults, not this shell's.
func pristineCLI() *cobra.Command {
	saved := map[string]string{}
	for _, kv := range os.Environ() {
		if name, val, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "KEEL_") {
			saved[name] = val
			os.Unsetenv(name)
		}
	}
	defer func() {
		for name, val := range saved {
			os.Setenv(name, val)
		}
	}()
	root := newCLI()
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd() // cobra adds it at Execute: document it too
	return root
}
