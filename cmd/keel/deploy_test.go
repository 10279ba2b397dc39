package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The deploy/ files and the Dockerfile, checked without running them: what each must
// say, and, where systemd-analyze is installed (Debian's systemd package), the unit as
// systemd reads it. The image itself runs in image_test.go (make image-test).

func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// missingLines reports the lines of want that text lacks (whole lines, trimmed).
func missingLines(text string, want ...string) []string {
	have := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	var miss []string
	for _, w := range want {
		if !have[w] {
			miss = append(miss, w)
		}
	}
	return miss
}

// TestSystemdUnit: deploy/systemd/keel.service runs the node as its own dynamic user
// with a private state directory, restarts it on failure, raises its file limit and
// confines it; systemd-analyze verify finds nothing to say about it, and its security
// exposure stays at most 2.0 ("OK").
func TestSystemdUnit(t *testing.T) {
	unit := readRepoFile(t, "deploy/systemd/keel.service")
	if miss := missingLines(unit, "DynamicUser=yes", "StateDirectory=keel", "StateDirectoryMode=0700",
		"LimitNOFILE=65536", "Restart=on-failure", "ExecStart=/usr/local/bin/keel agent",
		"Environment=KEEL_DATA_DIR=/var/lib/keel", "NoNewPrivileges=yes", "ProtectSystem=strict",
		"KillSignal=SIGTERM"); len(miss) > 0 {
		t.Errorf("keel.service lacks %q", miss)
	}
	env := readRepoFile(t, "deploy/systemd/keel.env")
	for _, l := range strings.Split(env, "\n") {
		if name, _, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			if newAgentCmd().Flags().Lookup(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "KEEL_"), "_", "-"))) == nil {
				t.Errorf("keel.env: %s names no agent flag", name)
			}
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package: systemd): unit checked statically only")
	}
	// verify wants ExecStart's binary to exist: this test's own executable stands in.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keel.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/keel", self)), 0o644)
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=yes", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for keel.service: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Skipf("systemd-analyze security --offline unavailable here: %v", err)
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2.0 {
		t.Errorf("security exposure %.1f, want <= 2.0:\n%s", level, out)
	}
}

// TestDockerfile: the image's default is a production node — no -dev, TLS left to the
// operator (the node refuses plain text), data on a volume, a non-root numeric user,
// a health check that needs no shell, and every port on every interface, the etcd API
// included (it once listened on the container's loopback only).
func TestDockerfile(t *testing.T) {
	df := readRepoFile(t, "Dockerfile")
	for _, want := range []string{"FROM scratch", "USER 65532:65532", "VOLUME /data", `ENTRYPOINT ["/keel"]`,
		`CMD ["agent"]`, `CMD ["/keel", "health", "-timeout", "4s"]`, "KEEL_DATA_DIR=/data", "KEEL_HTTP_ADDR=0.0.0.0:7370",
		"KEEL_RAFT_ADDR=0.0.0.0:7371", "KEEL_ETCD_ADDR=0.0.0.0:2379", "EXPOSE 7370 7371 7372 2379",
		"COPY --chown=65532:65532 bin/image-root/ /"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	for _, l := range strings.Split(df, "\n") {
		if !strings.HasPrefix(l, "#") && (strings.Contains(l, "-dev") || strings.Contains(l, "-insecure")) {
			t.Errorf("Dockerfile: %q: -dev and -insecure only when asked", l)
		}
	}
}

// TestComposeFile: deploy/compose/compose.yaml is three nodes, each with its own
// certificate, Raft advertise name and data volume, gossip encrypted, TLS on, and
// every published port on loopback only. (make image-test runs it.)
func TestComposeFile(t *testing.T) {
	var f struct {
		Services map[string]struct {
			Hostname    string            `yaml:"hostname"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "deploy/compose/compose.yaml")), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Services) != 3 {
		t.Fatalf("%d services, want 3", len(f.Services))
	}
	for name, s := range f.Services {
		env := s.Environment
		for k, want := range map[string]string{"KEEL_ADVERTISE": name + ":7371", "KEEL_CERT_FILE": "/etc/keel/tls/" + name + ".pem",
			"KEEL_KEY_FILE": "/etc/keel/tls/" + name + "-key.pem", "KEEL_CA_FILE": "/etc/keel/tls/keel-ca.pem",
			"KEEL_BOOTSTRAP_EXPECT": "3"} {
			if env[k] != want {
				t.Errorf("%s: %s = %q, want %q", name, k, env[k], want)
			}
		}
		if env["KEEL_ENCRYPT"] == "" || env["KEEL_INSECURE"] != "" || s.Hostname != name {
			t.Errorf("%s: want gossip encrypted, no -insecure, hostname %s: %+v", name, name, s)
		}
		if !slices.Contains(s.Volumes, name+"-data:/data") {
			t.Errorf("%s: volumes %v, want %s-data:/data", name, s.Volumes, name)
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %q is published beyond loopback", name, p)
			}
		}
	}
}
