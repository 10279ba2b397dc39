package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

// k8sTestBinary is the test binary of k8s.io/kubernetes/test/integration/<pkg>,
// built with `go test -c` (see k8sBinary). A cold build of one package takes tens of
// minutes.
func k8sTestBinary(t *testing.T, pkg string) string {
	return k8sBinary(t, pkg+".test", "test", "-c", "k8s.io/kubernetes/test/integration/"+pkg)
}

// kubeAPIServerBinary is k8s.io/kubernetes/cmd/kube-apiserver, built with `go build`
// (see k8sBinary): about as long as a test package when the build cache is cold,
// half a minute when one of them was built first.
func kubeAPIServerBinary(t *testing.T) string {
	return k8sBinary(t, "kube-apiserver", "build", "k8s.io/kubernetes/cmd/kube-apiserver")
}

// k8sBinary is the binary name: the one in KEEL_K8S_BIN_DIR when that variable is set
// and the file is there, otherwise built (once per run) by `go <goArgs> -o <path>` in
// this module, whose go.mod pins the Kubernetes release. Safe for concurrent use.
func k8sBinary(t *testing.T, name string, goArgs ...string) string {
	t.Helper()
	testBins.mu.Lock()
	defer testBins.mu.Unlock()
	if p, ok := testBins.path[name]; ok {
		return p
	}
	out := filepath.Join(binDir, name)
	if _, err := os.Stat(out); err == nil {
		t.Logf("using prebuilt %s", out)
	} else {
		t.Logf("building %s (go %s; cold, tens of minutes)", out, strings.Join(goArgs, " "))
		args := append([]string{goArgs[0], "-o", out}, goArgs[1:]...)
		start := time.Now()
		if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, b)
		}
		t.Logf("built %s in %v", out, time.Since(start).Round(time.Second))
	}
	if testBins.path == nil {
		testBins.path = map[string]string{}
	}
	testBins.path[name] = out
	return out
}
