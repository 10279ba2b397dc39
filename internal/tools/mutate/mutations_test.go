package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestMutationsApply: every mutation's text occurs exactly once in its file, so a
// refactor that moves or rewrites the code a mutation targets fails here, in go test,
// rather than leaving a deliberate bug that is never planted (three did, after kv's
// split, until this test).
func TestMutationsApply(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range mutations {
		if seen[m.Name] {
			t.Errorf("mutation %s: name used twice", m.Name)
		}
		seen[m.Name] = true
		b, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("mutation %s: %v", m.Name, err)
			continue
		}
		if n := bytes.Count(b, []byte(m.Old)); n != 1 {
			t.Errorf("mutation %s: its text occurs %d times in %s, want once", m.Name, n, m.File)
		}
		if m.Pkg == "" {
			t.Errorf("mutation %s: no package to test", m.Name)
		}
	}
}
