package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// keelBin is keel built from this tree; binDir holds the Kubernetes test binaries.
var keelBin, binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "k8s-judge-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keelBin = filepath.Join(dir, "keel")
	binDir = os.Getenv("KEEL_K8S_BIN_DIR")
	if binDir == "" {
		binDir = dir
	}
	build := exec.Command("go", "build", "-o", keelBin, "./cmd/keel")
	build.Dir = "../../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build keel:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var testBins struct {
	mu   sync.Mutex
	path map[string]string
}

// k8sTestBinary is the test binary of k8s.io/kubernetes/test/integration/<pkg>: the
// one in KEEL_K8S_BIN_DIR named <pkg>.test when that variable is set and the file is
// there, otherwise built (once per run) with `go test -c` in this module, whose go.mod
// pins the Kubernetes release. A cold build of one package takes tens of minutes.
func k8sTestBinary(t *testing.T, pkg string) string {
	t.Helper()
	testBins.mu.Lock()
	defer testBins.mu.Unlock()
	if p, ok := testBins.path[pkg]; ok {
		return p
	}
	out := filepath.Join(binDir, pkg+".test")
	if _, err := os.Stat(out); err == nil {
		t.Logf("using prebuilt %s", out)
	} else {
		t.Logf("building %s (go test -c; cold, tens of minutes)", out)
		build := exec.Command("go", "test", "-c", "-o", out, "k8s.io/kubernetes/test/integration/"+pkg)
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go test -c %s: %v\n%s", pkg, err, b)
		}
	}
	if testBins.path == nil {
		testBins.path = map[string]string{}
	}
	testBins.path[pkg] = out
	return out
}
