package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The latest table goes between these markers in bench/README.md.
const (
	markBegin = "<!-- bench-table:begin -->"
	markEnd   = "<!-- bench-table:end -->"
)

// readmeCmd pastes out/env.txt and out/table.md between the markers of the README.
func readmeCmd(args []string) error {
	fs := flag.NewFlagSet("readme", flag.ExitOnError)
	out := fs.String("out", "", "results dir of a compare run")
	readme := fs.String("readme", "bench/README.md", "README to update")
	fs.Parse(args)
	table, err := os.ReadFile(filepath.Join(*out, "table.md"))
	if err != nil {
		return err
	}
	env, _ := os.ReadFile(filepath.Join(*out, "env.txt"))
	doc, err := os.ReadFile(*readme)
	if err != nil {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, markBegin), strings.Index(s, markEnd)
	if i < 0 || j < i {
		return errors.New("readme: table markers not found")
	}
	block := fmt.Sprintf("%s\nRun `%s` (raw results in bench/results/%s/).\n\n```\n%s```\n\n%s%s",
		markBegin, "make bench-compare", filepath.Base(*out), env, table, markEnd)
	s = s[:i] + block + s[j+len(markEnd):]
	return os.WriteFile(*readme, []byte(s), 0o644)
}
