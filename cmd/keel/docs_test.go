package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestDocsMan: `keel docs man DIR` writes one man page per visible command of the tree
// (completion included), each a section-1 page with its flags, and without the
// defaults of the shell's KEEL_* variables. When man is installed each page renders.
func TestDocsMan(t *testing.T) {
	t.Setenv("KEEL_ADDR", "10.9.8.7:7370")
	dir := filepath.Join(t.TempDir(), "man1")
	if out, err := runCLI(t, "docs", "man", dir); err != nil {
		t.Fatalf("docs man: %v\n%s", err, out)
	}
	if os.Getenv("KEEL_ADDR") != "10.9.8.7:7370" {
		t.Errorf("docs man left KEEL_ADDR = %q, want it set back", os.Getenv("KEEL_ADDR"))
	}
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.Parent() != nil {
			return
		}
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newCLI()
	root.InitDefaultCompletionCmd()
	walk(root)
	for _, name := range append(want, "keel-completion-bash.1", "keel-keymigrate-advance.1") {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("no page %s: %v", name, err)
			continue
		}
		if page := string(b); !strings.Contains(page, `.TH "KEEL" "1"`) || strings.Contains(page, "10.9.8.7") {
			t.Errorf("%s: want a section-1 page without the environment's defaults:\n%.400s", name, page)
		}
	}
	get, _ := os.ReadFile(filepath.Join(dir, "keel-get.1"))
	if !strings.Contains(string(get), "prefix") || !strings.Contains(string(get), "127.0.0.1:7370") {
		t.Errorf("keel-get.1 lacks its flags or the default address:\n%s", get)
	}
	if _, err := exec.LookPath("man"); err != nil {
		t.Log("man not installed: pages not rendered")
		return
	}
	out, err := exec.Command("man", "-l", "-P", "cat", filepath.Join(dir, "keel-get.1")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "keel-get") {
		t.Errorf("man -l keel-get.1: %v\n%s", err, out)
	}
}

// TestCompletionScripts: `keel completion bash|zsh|fish` print a script for the shell
// (the README's install lines use them).
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_keel", "zsh": "#compdef keel", "fish": "complete -c keel"} {
		out, err := runCLI(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s = %v, want a script with %q (got %d bytes)", shell, err, want, len(out))
		}
	}
}
