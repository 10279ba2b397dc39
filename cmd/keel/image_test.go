//go:build image

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-kv/keel/internal/freeport"
)

// The container image (make image-test): run by Docker from KEEL_IMAGE, its ports
// published on loopback only. Without Docker the tests skip, saying so (fail with
// KEEL_IMAGE_STRICT=1); the static checks of the Dockerfile are in deploy_test.go.

func imageOrSkip(t *testing.T) string {
	t.Helper()
	img := os.Getenv("KEEL_IMAGE")
	why := ""
	switch {
	case img == "":
		why = "KEEL_IMAGE is not set (make image-test sets it)"
	default:
		if out, err := exec.Command("docker", "image", "inspect", img).CombinedOutput(); err != nil {
			why = fmt.Sprintf("docker cannot inspect %s: %v %s", img, err, out)
		}
	}
	if why != "" {
		if os.Getenv("KEEL_IMAGE_STRICT") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	return img
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// runContainer starts a detached container, removed (with its anonymous volume) at
// the end; its log is printed when the test failed.
func runContainer(t *testing.T, args ...string) string {
	t.Helper()
	id := docker(t, append([]string{"run", "-d"}, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("docker", "logs", "--tail", "40", id).CombinedOutput()
			t.Logf("container log:\n%s", out)
		}
		exec.Command("docker", "rm", "-f", "-v", id).Run()
	})
	return id
}

// waitHealthy waits until Docker's HEALTHCHECK (keel health) reports the container healthy.
func waitHealthy(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := docker(t, "inspect", "--format", "{{.State.Health.Status}}", id)
		if st == "healthy" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container health %q after 60s", st)
		}
		time.Sleep(time.Second)
	}
}

// etcdRange sends one etcd Range to addr until the etcd door answers it (or, with
// authNeeded, refuses it for want of a token, as etcd with auth on does): the etcd
// port is reachable from outside.
func etcdRange(t *testing.T, addr string, creds credentials.TransportCredentials, authNeeded bool) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, last = pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		cancel()
		if last == nil || (authNeeded && strings.Contains(last.Error(), "user name is empty")) {
			return
		}
	}
	t.Fatalf("etcd Range on %s: %v", addr, last)
}

// TestImageDefaultRefusesPlainText: the image's default command is a production node:
// without certificates it refuses to start and says how to make them.
func TestImageDefaultRefusesPlainText(t *testing.T) {
	img := imageOrSkip(t)
	out, err := exec.Command("docker", "run", "--rm", img).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no TLS configured") {
		t.Fatalf("docker run %s = %v, want a refusal without TLS:\n%s", img, err, out)
	}
	if u := docker(t, "image", "inspect", "--format", "{{.Config.User}}", img); u != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532", u)
	}
}

// TestImageDev: `agent -dev`, asked for, serves HTTP and the etcd API on every
// interface of the container: both reachable through the published ports.
func TestImageDev(t *testing.T) {
	img := imageOrSkip(t)
	httpAddr, etcdAddr := freeport.Addr(), freeport.Addr()
	id := runContainer(t, "-p", httpAddr+":7370", "-p", etcdAddr+":2379", img, "agent", "-dev")
	cliUntil(t, "health", "-addr", httpAddr, "--ready")
	cliUntil(t, "put", "-addr", httpAddr, "k", "v")
	etcdRange(t, etcdAddr, insecure.NewCredentials(), false)
	waitHealthy(t, id)
}

// TestImageTLS: the production default with certificates mounted and named by
// KEEL_*_FILE (as deploy/compose does): the node bootstraps on the /data volume, its
// health check turns healthy over mutual TLS, and the HTTP and etcd ports answer.
func TestImageTLS(t *testing.T) {
	img := imageOrSkip(t)
	dir := t.TempDir()
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-node", "n1"},
		{"tls", "cert", "create", "-client", "ops"}} {
		if _, err := runKeel(t, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	// The container's user (65532) reads the files: in production chown them to it.
	os.Chmod(dir, 0o755)
	for _, f := range []string{"keel-ca.pem", "n1.pem", "n1-key.pem"} {
		os.Chmod(filepath.Join(dir, f), 0o644)
	}
	httpAddr, etcdAddr := freeport.Addr(), freeport.Addr()
	id := runContainer(t, "-p", httpAddr+":7370", "-p", etcdAddr+":2379", "-v", dir+":/etc/keel/tls:ro",
		"-e", "KEEL_CA_FILE=/etc/keel/tls/keel-ca.pem", "-e", "KEEL_CERT_FILE=/etc/keel/tls/n1.pem",
		"-e", "KEEL_KEY_FILE=/etc/keel/tls/n1-key.pem", "-e", "KEEL_BOOTSTRAP=true", img)
	ca, cert, key := filepath.Join(dir, "keel-ca.pem"), filepath.Join(dir, "ops.pem"), filepath.Join(dir, "ops-key.pem")
	t.Setenv("KEEL_CA_FILE", ca)
	t.Setenv("KEEL_CERT_FILE", cert)
	t.Setenv("KEEL_KEY_FILE", key)
	cliUntil(t, "health", "-addr", "https://"+httpAddr, "--ready")
	waitHealthy(t, id)
	if m := docker(t, "inspect", "--format", "{{range .Mounts}}{{.Destination}} {{end}}", id); !strings.Contains(m, "/data") {
		t.Errorf("mounts %q: want the /data volume", m)
	}
	global.caFile, global.certFile, global.keyFile = ca, cert, key
	cfg, err := clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	etcdRange(t, etcdAddr, credentials.NewTLS(cfg.Clone()), true) // ACLs deny until bootstrap
}

// composeCmd is Docker's compose command here: the plugin, or docker-compose.
func composeCmd() ([]string, bool) {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}, true
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}, true
	}
	return nil, false
}

// TestImageCompose: deploy/compose as its header says — certs.sh, up, ACL bootstrap
// over mutual TLS — gives three healthy members that announce reachable addresses,
// replicate a write, and serve the etcd port (ports 4170-4379 on loopback must be free).
func TestImageCompose(t *testing.T) {
	img := imageOrSkip(t)
	compose, ok := composeCmd()
	if !ok {
		t.Skip("neither docker compose nor docker-compose is installed (Debian package: docker-compose)")
	}
	bin := os.Getenv("KEEL_BIN")
	if bin == "" {
		t.Skip("KEEL_BIN is not set (make image-test sets it)")
	}
	dir := t.TempDir()
	for _, f := range []string{"compose.yaml", "certs.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "compose", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o755)
	}
	run := func(name string, args []string, env ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("sh", []string{"certs.sh"}, "KEEL="+bin)
	project := []string{"-p", "keel-compose-test", "-f", "compose.yaml"}
	up := append(append(compose[1:], project...), "up", "-d")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command(compose[0], append(append(compose[1:], project...), "logs", "--tail", "30")...).CombinedOutput()
			t.Logf("compose logs:\n%s", out)
		}
		down := exec.Command(compose[0], append(append(compose[1:], project...), "down", "-v")...)
		down.Dir = dir
		down.Run()
	})
	run(compose[0], up, "KEEL_IMAGE="+img)
	tls := filepath.Join(dir, "tls")
	t.Setenv("KEEL_CA_FILE", filepath.Join(tls, "keel-ca.pem"))
	t.Setenv("KEEL_CERT_FILE", filepath.Join(tls, "ops.pem"))
	t.Setenv("KEEL_KEY_FILE", filepath.Join(tls, "ops-key.pem"))
	t.Setenv("KEEL_TOKEN", "")
	for _, port := range []string{"4170", "4270", "4370"} {
		cliUntil(t, "health", "-addr", "https://127.0.0.1:"+port, "--ready")
	}
	out := cliUntil(t, "acl", "bootstrap", "-addr", "https://127.0.0.1:4170")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Setenv("KEEL_TOKEN", lines[len(lines)-1])
	members := cliUntil(t, "members", "-addr", "https://127.0.0.1:4170")
	for _, want := range []string{"n1:7370", "n2:7370", "n3:7370"} {
		if !strings.Contains(members, want) {
			t.Errorf("members lacks the reachable HTTP address %s:\n%s", want, members)
		}
	}
	cliUntil(t, "put", "-addr", "https://127.0.0.1:4370", "greeting", "hello")
	if got := cliUntil(t, "get", "-addr", "https://127.0.0.1:4270", "greeting"); strings.TrimSpace(got) != "hello" {
		t.Errorf("get on n2 = %q, want hello", got)
	}
	global.caFile, global.certFile, global.keyFile = os.Getenv("KEEL_CA_FILE"), os.Getenv("KEEL_CERT_FILE"), os.Getenv("KEEL_KEY_FILE")
	cfg, err := clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	etcdRange(t, "127.0.0.1:4179", credentials.NewTLS(cfg), true)
}
