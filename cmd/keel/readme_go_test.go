//go:build readme

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeGoPreamble opens the file the README's ```go blocks are checked in: each block
// becomes the body of a function with a context and a client in scope, as the README
// presents them.
const readmeGoPreamble = `package readme

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

var (
	_ = fmt.Sprint
	_ = log.Fatal
	_ = os.Getenv
	_ = time.Second
	_ = api.OpPut
	_ = client.New
)

func useResource(int64) {}
`

// TestREADMEGoBlocks compiles and vets every ```go block of the README in a temporary
// module that uses this tree for github.com/keel-kv/keel: a snippet that is not Go
// (an elided "{...}", an unused variable, a renamed method) fails here.
func TestREADMEGoBlocks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	src.WriteString(readmeGoPreamble)
	blocks := 0
	var in bool
	for i, l := range strings.Split(string(text), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in = true
			blocks++
			fmt.Fprintf(&src, "\n// README.md:%d\nfunc block%d(ctx context.Context, c *client.Client) {\n", i+2, blocks)
		case in && strings.TrimSpace(l) == "```":
			in = false
			src.WriteString("}\n")
		case in:
			src.WriteString(l + "\n")
		}
	}
	if blocks < 3 {
		t.Fatalf("README.md has %d go blocks, want the client, watch and lease examples", blocks)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The tree's own requirements and sums, so nothing is fetched.
	var gomod strings.Builder
	gomod.WriteString("module keelreadme\n\n")
	for _, l := range strings.Split(string(mod), "\n") {
		if !strings.HasPrefix(l, "module ") {
			gomod.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&gomod, "\nrequire github.com/keel-kv/keel v0.0.0\n\nreplace github.com/keel-kv/keel => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"go.mod": gomod.String(), "go.sum": string(sum), "readme.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vet := exec.Command("go", "vet", ".")
	vet.Dir = dir
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("the README's go blocks do not vet (lines are README.md's where marked):\n%s\n%s", out, numbered(src.String()))
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}
