package etcdsnap

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/keel-kv/keel/internal/freeport"
)

var keelBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "etcdsnap-judge-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keelBin = filepath.Join(dir, "keel")
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

// keelNode is a keel process (-dev) with its etcd door and HTTP API.
type keelNode struct {
	c        *clientv3.Client
	httpAddr string
	stop     func()
}

func startKeel(t *testing.T) *keelNode {
	t.Helper()
	dir := t.TempDir()
	etcdAddr, httpAddr := freeport.Addr(), freeport.Addr()
	lf, err := os.Create(filepath.Join(dir, "keel.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(keelBin, "agent", "-dev", "-data-dir", filepath.Join(dir, "data"), "-http-addr", httpAddr,
		"-raft-addr", freeport.Addr(), "-etcd-addr", etcdAddr)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	n := &keelNode{httpAddr: httpAddr}
	n.stop = func() {
		if n.c != nil {
			n.c.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(n.stop)
	if n.c, err = newClient(etcdAddr); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "keel.log"))
			t.Fatalf("keel not ready within 30s:\n%s", log)
		}
	}
	return n
}

// keel runs the keel CLI.
func keel(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(keelBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("keel %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// etcdConfig is an embedded etcd's configuration on fresh ports, data in dir.
func etcdConfig(dir, name string) (*embed.Config, string) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = name
	cfg.LogLevel = "error"
	client, peer := freeport.Addr(), freeport.Addr()
	cu, _ := url.Parse("http://" + client)
	pu, _ := url.Parse("http://" + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	return cfg, client
}

func startEtcd(t *testing.T, cfg *embed.Config, client string) *clientv3.Client {
	t.Helper()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatal(errors.New("etcd not ready within 30s"))
	}
	c, err := newClient(client)
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); e.Close() })
	return c
}

func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// etcd34 is Debian's etcd (3.4), a judge when installed.
const etcd34 = "/usr/bin/etcd"

// startEtcd34 runs Debian's etcd as a process with data in dir.
func startEtcd34(t *testing.T, dir string) (*clientv3.Client, string) {
	t.Helper()
	client, peer := freeport.Addr(), freeport.Addr()
	lf, err := os.Create(filepath.Join(dir, "etcd34.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(etcd34, "--name", "e34", "--data-dir", filepath.Join(dir, "etcd34"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e34=http://"+peer)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); lf.Close() })
	c, err := newClient(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Put(ctx, "ready", "1")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd34.log"))
			t.Fatalf("etcd 3.4 not ready: %v\n%s", err, log)
		}
	}
	return c, client
}
