package etcdctl

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

// etcdctlBin is the etcdctl 3.7 binary TestMain builds from this module's go.mod;
// keelBin the keel binary it builds from this tree.
var etcdctlBin, keelBin string

// keelEnd and etcdEnd are the two servers every session runs against.
var keelEnd, etcdEnd *backend

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "etcdctljudge-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	etcdctlBin, keelBin = filepath.Join(dir, "etcdctl"), filepath.Join(dir, "keel")
	if err := goBuild(".", etcdctlBin, "go.etcd.io/etcd/etcdctl/v3"); err != nil {
		fmt.Fprintln(os.Stderr, "build etcdctl:", err)
		return 1
	}
	if err := goBuild("../../..", keelBin, "./cmd/keel"); err != nil {
		fmt.Fprintln(os.Stderr, "build keel:", err)
		return 1
	}
	stopKeel, err := startKeel(filepath.Join(dir, "keel-node"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopKeel()
	stopEtcd, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopEtcd()
	return m.Run()
}

// goBuild builds pkg into out from the module at dir.
func goBuild(dir, out, pkg string) error {
	build := exec.Command("go", "build", "-o", out, pkg)
	build.Dir = dir
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

// startKeel starts `keel agent -dev` with its etcd door on free loopback ports and
// waits until it is ready.
func startKeel(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	etcdAddr, httpAddr := freeport.Addr(), freeport.Addr()
	logPath := filepath.Join(dir, "keel.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(keelBin, "agent", "-dev", "-data-dir", filepath.Join(dir, "data"), "-http-addr", httpAddr,
		"-raft-addr", freeport.Addr(), "-etcd-addr", etcdAddr)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	ready := func() bool { return httpReady("http://"+httpAddr+"/readyz") && leaderKnown(etcdAddr) }
	if err := waitFor(ready, done, 30*time.Second); err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("keel: %w\n%s", err, log)
	}
	if keelEnd, err = newBackend("keel", etcdAddr); err != nil {
		stop()
		return nil, err
	}
	return func() { keelEnd.close(); stop() }, nil
}

// startEtcd starts an embedded etcd 3.7 (one member) on free loopback ports.
func startEtcd(dir string) (func(), error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "judge"
	client, peer := url.URL{Scheme: "http", Host: freeport.Addr()}, url.URL{Scheme: "http", Host: freeport.Addr()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{dir + ".log"} // its shutdown logs errors; dir does not exist yet
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("embedded etcd: not ready within 30 s")
	}
	if etcdEnd, err = newBackend("etcd", client.Host); err != nil {
		e.Close()
		return nil, err
	}
	return func() { etcdEnd.close(); e.Close() }, nil
}

// waitFor polls cond until it holds, done closes (the process exited) or limit passes.
func waitFor(cond func() bool, done <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("the process exited")
		default:
		}
		if cond() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %v", limit)
}

func httpReady(u string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func leaderKnown(addr string) bool {
	c, err := newClient(addr)
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := c.Status(ctx, addr)
	return err == nil && st.Leader != 0
}

func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}
