package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestOperationsDocListsEveryAgentFlag: docs/operations.md's flags table and the
// agent's flag set name the same flags (hidden, test-only flags aside).
func TestOperationsDocListsEveryAgentFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `-([a-z0-9-]+)[^`]*` \\|")
	documented := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			documented[m[1]] = true
		}
	}
	has := map[string]bool{}
	newAgentCmd().Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			has[f.Name] = true
		}
	})
	var missing, extra []string
	for name := range has {
		if !documented[name] {
			missing = append(missing, "-"+name)
		}
	}
	for name := range documented {
		if !has[name] {
			extra = append(extra, "-"+name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("docs/operations.md's flags table lacks %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("docs/operations.md's flags table lists %v, which keel agent does not have", extra)
	}
	if len(has) < 20 {
		t.Errorf("only %d agent flags found: the flag set is not what the test thinks", len(has))
	}
}
