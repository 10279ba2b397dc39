// Command keel is the single keel binary: `keel agent` runs a node; every other
// subcommand is a client of a node's HTTP API.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

func main() {
	root := newCLI()
	root.SetArgs(normalizeArgs(root, os.Args[1:]))
	if err := root.Execute(); err != nil {
		var child *childExit
		if errors.As(err, &child) {
			os.Exit(child.code) // the command said why on its own stderr
		}
		fmt.Fprintln(os.Stderr, errorLine(explain(err)))
		os.Exit(exitCode(err))
	}
}

// errorLine is what the CLI prints for err: one "keel:" prefix, whether or not the
// error (the Go client's do, a usage line "keel get KEY: ...") already carries it.
func errorLine(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "keel: ") || strings.HasPrefix(msg, "keel ") {
		return msg
	}
	return "keel: " + msg
}
