// Command keel is the single keel binary: `keel agent` runs a node; every other
// subcommand is a client of a node's HTTP API.
package main

import (
	"fmt"
	"os"
)

func main() {
	root := newRootCmd()
	root.SetArgs(normalizeArgs(root, os.Args[1:]))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "keel:", err)
		os.Exit(exitCode(err))
	}
}
