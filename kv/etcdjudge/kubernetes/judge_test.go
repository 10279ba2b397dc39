package kubernetes

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// judge is one Kubernetes integration test package run against keel and etcd 3.4.
type judge struct {
	pkg     string        // under k8s.io/kubernetes/test/integration/
	skip    []skipped     // tests not run, each with its reason (README.md lists them too)
	skip34  []skipped     // tests not run on the etcd 3.4 control only
	fixture bool          // needs k8s.io/api's serialization fixtures at ../../../staging/src/k8s.io/api/testdata
	timeout time.Duration // for the whole package (the binary's -test.timeout)
}

// skipped is a test left out of a judge: its -test.skip pattern and why.
type skipped struct {
	pattern, reason string
}

// judges are the packages run, in order; README.md explains each choice.
var judges = []judge{
	{pkg: "storageversion", timeout: 10 * time.Minute},
	{pkg: "storageversionmigrator", timeout: 20 * time.Minute, skip34: []skipped{{
		pattern: "^TestStorageVersionMigration$",
		reason: "on Debian's etcd 3.4.23 the secrets migration stays Running until the test's 5-min " +
			"poll ends (keel passes it); probable cause: 3.4.23 predates 3.4.31, so kube-apiserver turns " +
			"RequestWatchProgress off (it logs so) and the migrator's wait for the garbage collector's " +
			"informer to reach the migration's resourceVersion is not sped up by progress notifications",
	}}},
	{pkg: "etcd", fixture: true, timeout: 20 * time.Minute},
}

// TestKubernetesIntegration runs each judge's test binary twice: against a follower
// of a fresh 3-node keel cluster (its etcd door, over loopback TCP), and against
// Debian's etcd 3.4 as the control (skipped, with a log line, when /usr/bin/etcd is
// absent, unless KEEL_K8S_STRICT=1). KEEL_K8S_PKGS (a regexp) picks judges,
// KEEL_K8S_RUN is passed on as the binaries' -test.run.
func TestKubernetesIntegration(t *testing.T) {
	pick := regexp.MustCompile(os.Getenv("KEEL_K8S_PKGS"))
	for _, j := range judges {
		if !pick.MatchString(j.pkg) {
			continue
		}
		t.Run(j.pkg, func(t *testing.T) {
			bin := k8sTestBinary(t, j.pkg)
			t.Run("keel3", func(t *testing.T) {
				_, follower := startKeelCluster(t).waitLeader(t, 30*time.Second)
				j.run(t, bin, follower.door, j.skip)
			})
			t.Run("etcd34", func(t *testing.T) {
				skipWithoutEtcd34(t)
				j.run(t, bin, startEtcd34Cluster(t, 1).members[0].door, slices.Concat(j.skip, j.skip34))
			})
		})
	}
}

// run runs the package's test binary, less the skip tests, with its kube-apiserver's
// storage at the etcd client address door, and fails the test when the binary fails
// or did not use door.
func (j judge) run(t *testing.T, bin, door string, skip []skipped) {
	url := "http://" + door
	dir := t.TempDir()
	if j.fixture {
		dir = fixtureTree(t, j.pkg)
	}
	logDir := os.Getenv("KEEL_K8S_LOG_DIR")
	if logDir == "" {
		logDir = t.TempDir()
	}
	logPath := filepath.Join(logDir, strings.ReplaceAll(t.Name(), "/", "_")+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	args := []string{"-test.v", "-test.timeout", j.timeout.String()}
	if len(skip) > 0 {
		var pats []string
		for _, s := range skip {
			t.Logf("skipping %s: %s", s.pattern, s.reason)
			pats = append(pats, s.pattern)
		}
		args = append(args, "-test.skip", strings.Join(pats, "|"))
	}
	if r := os.Getenv("KEEL_K8S_RUN"); r != "" {
		args = append(args, "-test.run", r)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// The framework dials KUBE_INTEGRATION_ETCD_URL and, when nothing answers, starts
	// an etcd of its own found on PATH: a refusing etcd first on PATH makes that a
	// failure, not a silent run against the wrong store.
	cmd.Env = append(os.Environ(), "KUBE_INTEGRATION_ETCD_URL="+url, "PATH="+pathWithRefusingEtcd(t), "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = lf, lf
	start := time.Now()
	runErr := cmd.Run()
	out, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r := summarize(string(out))
	t.Logf("%s against %s: %d passed, %d failed, %d skipped in %v (log %s)",
		j.pkg, url, len(r.pass), len(r.fail), len(r.skip), time.Since(start).Round(time.Second), logPath)
	if !strings.Contains(string(out), "etcd already running at "+url) {
		t.Errorf("the binary did not report using %s", url)
	}
	if runErr != nil || len(r.fail) > 0 || len(r.pass) == 0 {
		t.Errorf("%s: %v; failed: %v\n%s", j.pkg, runErr, r.fail, tail(string(out), 150))
	}
}

// results are the top-level test names a `-test.v` run reported by outcome.
type results struct{ pass, fail, skip []string }

var outcome = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)

func summarize(out string) results {
	var r results
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		m := outcome.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(m[2], "/") {
			continue
		}
		switch m[1] {
		case "PASS":
			r.pass = append(r.pass, m[2])
		case "FAIL":
			r.fail = append(r.fail, m[2])
		case "SKIP":
			r.skip = append(r.skip, m[2])
		}
	}
	return r
}

// fixtureTree is a working directory for the package's binary inside a temporary
// tree shaped like the Kubernetes repository: test/integration/<pkg>, with
// staging/src/k8s.io/api the k8s.io/api module this module pins (read-only, in the
// module cache), where its serialization fixtures live.
func fixtureTree(t *testing.T, pkg string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/api").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/api: %v", err)
	}
	api := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(api, "testdata")); err != nil {
		t.Fatalf("k8s.io/api fixtures: %v", err)
	}
	tree := t.TempDir()
	staging := filepath.Join(tree, "staging", "src", "k8s.io")
	wd := filepath.Join(tree, "test", "integration", pkg)
	for _, d := range []string{staging, wd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(api, filepath.Join(staging, "api")); err != nil {
		t.Fatal(err)
	}
	return wd
}

// pathWithRefusingEtcd is $PATH behind a directory whose etcd only fails loudly.
func pathWithRefusingEtcd(t *testing.T) string {
	dir := t.TempDir()
	script := "#!/bin/sh\necho 'k8s judge: the framework tried to start an etcd of its own' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("... last %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
}
