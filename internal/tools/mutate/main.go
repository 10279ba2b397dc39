// Command mutate checks that keel's tests catch the bugs they claim to: it applies
// named mutations (mutations.go), one at a time, to a temporary copy of the tree, runs
// the tests of the mutated package, and reports each mutation as caught (the tests
// failed), survived (they passed: a test is missing) or broken (it did not compile: fix
// the mutation). The tree itself is never touched.
//
//	go run ./internal/tools/mutate -list
//	go run ./internal/tools/mutate -check   # every mutation still applies to the code
//	go run ./internal/tools/mutate -only 'checker-unexpected|keymig-rollback-0'
//
// Each mutation runs only its package's tests, narrowed by its -run pattern; the whole
// list takes long on a shared machine: pick with -only. It exits 1 when a mutation
// survived or broke. `make mutate MUTATE=regexp` runs it.
//
// Why not a mutation-testing tool: github.com/go-gremlins/gremlins (v0.6.0 resolves;
// avito-tech/go-mutesting does not) mutates operators at random and runs every test per
// mutant; the bugs worth a name here (a rollback that leaves a key range behind, a
// checker rule gone silent) are not operator flips, and a named list stays reviewable.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Mutation is one deliberate bug: Old, found exactly once in File, becomes New.
type Mutation struct {
	Name string // short, unique
	Bug  string // what a keel with this bug would do
	File string // relative to the module root
	Old  string
	New  string
	Pkg  string // the package whose tests must catch it, e.g. ./chaos/
	Run  string // go test -run pattern ("" = every test of Pkg)
	Tags string // go test -tags
}

// Result is what became of one mutation.
type Result string

const (
	Caught   Result = "caught"
	Survived Result = "survived"
	Broken   Result = "broken"
)

func main() {
	list := flag.Bool("list", false, "list the mutations and exit")
	check := flag.Bool("check", false, "check that every mutation applies (its text occurs once), run no test")
	only := flag.String("only", "", "run only the mutations whose name matches this regexp")
	timeout := flag.Duration("timeout", 10*time.Minute, "go test -timeout of one mutation")
	verbose := flag.Bool("v", false, "print the test output of every mutation")
	flag.StringVar(&runOverride, "run", "", "go test -run pattern for every mutation (instead of each one's own)")
	flag.StringVar(&skip, "skip", "", "go test -skip pattern for every mutation (to see what the other tests catch)")
	flag.Parse()
	if *check {
		applies = true
	}
	if err := run(*list, *only, *timeout, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// runOverride and skip are the -run and -skip flags, applies the -check flag.
var (
	runOverride, skip string
	applies           bool
)

func run(list bool, only string, timeout time.Duration, verbose bool) error {
	re, err := regexp.Compile(only)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	var picked []Mutation
	for _, m := range mutations {
		if re.MatchString(m.Name) {
			picked = append(picked, m)
		}
	}
	if list {
		for _, m := range picked {
			fmt.Printf("%-32s %s (%s; %s -run %q)\n", m.Name, m.Bug, m.File, m.Pkg, m.Run)
		}
		return nil
	}
	if len(picked) == 0 {
		return errors.New("no mutation matches -only")
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "keel-mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(root, tmp); err != nil {
		return fmt.Errorf("copy the tree: %w", err)
	}
	bad := 0
	for _, m := range picked {
		res, out, took := try(tmp, m, timeout)
		if applies && res == Caught {
			res = "applies"
		}
		fmt.Printf("%-9s %-32s %s  (%s)\n", res, m.Name, m.Bug, took.Round(time.Second))
		if verbose || res == Broken {
			fmt.Println(indent(out))
		}
		if res != Caught && res != "applies" {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d mutations not caught", bad, len(picked))
	}
	return nil
}

// try applies m in the copy at dir, runs its tests and restores the file.
func try(dir string, m Mutation, timeout time.Duration) (Result, string, time.Duration) {
	path := filepath.Join(dir, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return Broken, err.Error(), 0
	}
	if n := bytes.Count(orig, []byte(m.Old)); n != 1 {
		return Broken, fmt.Sprintf("the text to replace occurs %d times in %s, want once", n, m.File), 0
	}
	if applies {
		return Caught, "", 0 // as far as -check goes
	}
	mutated := bytes.Replace(orig, []byte(m.Old), []byte(m.New), 1)
	if err := os.WriteFile(path, mutated, 0o644); err != nil {
		return Broken, err.Error(), 0
	}
	defer os.WriteFile(path, orig, 0o644)
	args := []string{"test", "-count=1", "-timeout", timeout.String()}
	if m.Tags != "" {
		args = append(args, "-tags", m.Tags)
	}
	switch {
	case runOverride != "":
		args = append(args, "-run", runOverride)
	case m.Run != "":
		args = append(args, "-run", m.Run)
	}
	if skip != "" {
		args = append(args, "-skip", skip)
	}
	args = append(args, m.Pkg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	switch {
	case err == nil:
		return Survived, string(out), took
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return Broken, string(out), took
	}
	return Caught, string(out), took
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// copyTree copies the files git knows of (tracked or not ignored) from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if err := copyFile(filepath.Join(root, rel), filepath.Join(dst, rel)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil // deleted in the work tree
	}
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil || st.IsDir() {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = append(lines[:20], append([]string{"    ..."}, lines[len(lines)-20:]...)...)
	}
	return "    " + strings.Join(lines, "\n    ")
}
