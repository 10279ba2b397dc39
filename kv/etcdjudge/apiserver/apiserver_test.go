package apiserver

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// upstream is the module whose storage tests judge keel, at the version go.mod requires.
const upstream = "k8s.io/apiserver"

// etcd3Pkg is the package under test inside the upstream module.
const etcd3Pkg = "./pkg/storage/etcd3/"

// testTimeout bounds the upstream run (-test.timeout): a hung watch must fail the
// judge, not the CI job. The compile before it is bounded by the caller's go test
// -timeout (Makefile).
const testTimeout = 10 * time.Minute

func TestAPIServerStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds keel and the apiserver's storage tests (minutes)")
	}
	dir := t.TempDir()
	keel := buildKeel(t, dir)
	mod := filepath.Join(dir, "apiserver")
	start := time.Now()
	copyTree(t, moduleDir(t), mod)
	swapTestServer(t, mod)
	applyPatches(t, mod)
	t.Logf("upstream copied and patched in %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	bin := compileUpstream(t, mod)
	t.Logf("go test -c %s: %v", etcd3Pkg, time.Since(start).Round(time.Second))

	start = time.Now()
	res := runUpstream(t, mod, bin, keel)
	t.Logf("run: %v", time.Since(start).Round(time.Second))
	res.report(t)
}

// buildKeel builds cmd/keel of this tree into dir.
func buildKeel(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "keel")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/keel")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build keel: %v\n%s", err, out)
	}
	return bin
}

// moduleDir is where the module cache holds upstream (downloaded if it is not there).
func moduleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", upstream).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", upstream, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		cmd := exec.Command("go", "mod", "download", upstream)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go mod download %s: %v\n%s", upstream, err, out)
		}
		return moduleDir(t)
	}
	return dir
}

// copyTree copies the regular files under src to dst, writable (the module cache's
// copy is read-only).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// swapTestServer puts testserver/test_server.go in the place of upstream's.
func swapTestServer(t *testing.T, mod string) {
	t.Helper()
	dst := filepath.Join(mod, "pkg/storage/etcd3/testserver")
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile("testserver/test_server.go", filepath.Join(dst, "test_server.go")); err != nil {
		t.Fatal(err)
	}
}

// applyPatches applies every patch of patches.go; a patch whose text is no longer in
// its file fails the judge (upstream moved: the list must be looked at again).
func applyPatches(t *testing.T, mod string) {
	t.Helper()
	for _, p := range patches {
		path := filepath.Join(mod, p.File)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("patch %s: %v", p.File, err)
		}
		if n := bytes.Count(b, []byte(p.Old)); n != 1 {
			t.Fatalf("patch %s: %q found %d times, want once", p.File, p.Old, n)
		}
		b = bytes.Replace(b, []byte(p.Old), []byte(p.New), 1)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// skipPattern is go test's -skip for the skips of patches.go.
func skipPattern() string {
	var names []string
	for _, s := range skips {
		names = append(names, s.Test)
	}
	return strings.Join(names, "|")
}

// compileUpstream builds the etcd3 package's test binary in mod (-trimpath: the
// build cache serves the next run although mod is a new directory each time; no vet:
// upstream's code is not what is judged).
func compileUpstream(t *testing.T, mod string) string {
	t.Helper()
	bin := filepath.Join(mod, "etcd3.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, "-trimpath", "-vet=off", etcd3Pkg)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", etcd3Pkg, err, out)
	}
	return bin
}

// runUpstream runs the etcd3 tests (bin, in the package's directory as go test does)
// against keel and decodes their test2json stream, logging each top-level test as
// it ends.
func runUpstream(t *testing.T, mod, bin, keel string) *results {
	t.Helper()
	args := []string{"tool", "test2json", "-t", bin, "-test.v=test2json", "-test.count=1",
		"-test.timeout=" + testTimeout.String()}
	if p := skipPattern(); p != "" {
		args = append(args, "-test.skip="+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(mod, etcd3Pkg)
	cmd.Env = append(os.Environ(), "KEEL_BIN="+keel)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	res := decode(out, func(e event) {
		if !strings.Contains(e.Test, "/") {
			t.Logf("%s %s (%.1fs)", e.Action, e.Test, e.Elapsed)
		}
	})
	err = cmd.Wait()
	if err != nil && len(res.failed()) == 0 {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.Bytes())
	}
	return res
}

// event is one line of go test -json.
type event struct {
	Action  string
	Test    string
	Output  string
	Elapsed float64
}

// results are the upstream tests' outcomes by name, with each test's output.
type results struct {
	outcome map[string]string // test name -> pass, fail or skip
	output  map[string]*strings.Builder
}

// decode reads the stream to its end; done hears each test's outcome as it comes.
func decode(r io.Reader, done func(event)) *results {
	res := &results{outcome: map[string]string{}, output: map[string]*strings.Builder{}}
	dec := json.NewDecoder(r)
	for {
		var e event
		if err := dec.Decode(&e); err != nil {
			return res
		}
		if e.Test == "" {
			continue
		}
		switch e.Action {
		case "pass", "fail", "skip":
			res.outcome[e.Test] = e.Action
			done(e)
		case "output":
			b := res.output[e.Test]
			if b == nil {
				b = &strings.Builder{}
				res.output[e.Test] = b
			}
			if b.Len() < 16<<10 {
				b.WriteString(e.Output)
			}
		}
	}
}

// leaves are the tests with no subtests of their own, sorted.
func (r *results) leaves() []string {
	var names []string
	for name := range r.outcome {
		parent := false
		for other := range r.outcome {
			if strings.HasPrefix(other, name+"/") {
				parent = true
				break
			}
		}
		if !parent {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// failed are the failed leaves.
func (r *results) failed() []string {
	var names []string
	for _, n := range r.leaves() {
		if r.outcome[n] == "fail" {
			names = append(names, n)
		}
	}
	return names
}

// report logs the counts (top-level tests and leaves) and fails t with the output of
// each failed leaf.
func (r *results) report(t *testing.T) {
	count := func(names []string) map[string]int {
		c := map[string]int{}
		for _, n := range names {
			c[r.outcome[n]]++
		}
		return c
	}
	var top []string
	for n := range r.outcome {
		if !strings.Contains(n, "/") {
			top = append(top, n)
		}
	}
	tc, lc := count(top), count(r.leaves())
	t.Logf("top-level tests: %d pass, %d fail, %d skip; leaves: %d pass, %d fail, %d skip; skipped by patches.go: %d",
		tc["pass"], tc["fail"], tc["skip"], lc["pass"], lc["fail"], lc["skip"], len(skips))
	for _, n := range r.failed() {
		t.Errorf("FAIL %s\n%s", n, r.output[n])
	}
	if len(r.outcome) == 0 {
		t.Error("no upstream test ran")
	}
}
