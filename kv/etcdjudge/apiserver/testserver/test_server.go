// Package testserver stands in for k8s.io/apiserver's pkg/storage/etcd3/testserver when
// the apiserver's storage tests judge keel: the same two functions (NewTestConfig,
// RunEtcd) with the same signatures, but RunEtcd starts a fresh `keel agent -dev` per
// test (the binary KEEL_BIN names) instead of an embedded etcd, and hands back the
// client the tests expect, wrapped in the same recorders.
//
// The judge copies this file over the upstream one in a temporary copy of the
// k8s.io/apiserver module, so it compiles there: it may import nothing of keel.
package testserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// NewTestConfig is the configuration RunEtcd reads: a data directory that ends with the
// test and, as upstream, the embedded etcd's config type, so that tests may set
// WatchProgressNotifyInterval on it. The client URL is picked by RunEtcd.
func NewTestConfig(t testing.TB) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	os.Chmod(cfg.Dir, 0o700)
	return cfg
}

// RunEtcd starts keel with cfg (or NewTestConfig(t) if nil) and returns a client of its
// etcd door. The process is stopped when the test ends.
func RunEtcd(t testing.TB, cfg *embed.Config) *kubernetes.Client {
	t.Helper()
	if cfg == nil {
		cfg = NewTestConfig(t)
	}
	addr := startKeel(t, cfg)
	cfg.ListenClientUrls = []url.URL{{Scheme: "http", Host: addr}}
	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: 10 * time.Second,
		Logger:      zaptest.NewLogger(t, zaptest.Level(zapcore.ErrorLevel)).Named("etcd-client"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	kubernetesRecorder := storagetesting.NewKubernetesRecorder(client.Kubernetes)
	client.KV = storagetesting.NewKVRecorder(client.KV, kubernetesRecorder)
	client.Kubernetes = kubernetesRecorder
	return client
}

// startKeel runs `keel agent -dev` on free loopback ports with its data under cfg.Dir
// and returns its etcd address once its etcd door answers Status with a leader.
func startKeel(t testing.TB, cfg *embed.Config) string {
	bin := os.Getenv("KEEL_BIN")
	if bin == "" {
		t.Fatal("testserver: KEEL_BIN names no keel binary")
	}
	etcdAddr, httpAddr, raftAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	args := []string{"agent", "-dev", "-data-dir", filepath.Join(cfg.Dir, "keel"),
		"-etcd-addr", etcdAddr, "-http-addr", httpAddr, "-raft-addr", raftAddr}
	if cfg.WatchProgressNotifyInterval > 0 {
		args = append(args, "-etcd-watch-progress-notify-interval", cfg.WatchProgressNotifyInterval.String())
	}
	logPath := filepath.Join(cfg.Dir, "keel.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	t.Cleanup(func() {
		stop(cmd, done)
		if t.Failed() {
			t.Logf("testserver: keel's log (%s), its end:\n%s", logPath, logTail(logPath, 8<<10))
		}
	})
	if err := waitLeader(etcdAddr, done); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("testserver: keel %v: %v\n%s", args, err, log)
	}
	return etcdAddr
}

// logTail is the last n bytes of the file at path (a failing test shows what keel
// said, which would otherwise go with the test's temporary directory).
func logTail(path string, n int64) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return []byte(err.Error())
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return b
}

// waitLeader polls Maintenance.Status until keel reports a leader (at most 30 s).
func waitLeader(addr string, done <-chan struct{}) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("the process exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, addr)
		cancel()
		if err == nil && st.Leader != 0 {
			return nil
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no leader within 30s (last error: %v)", last)
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func stop(cmd *exec.Cmd, done <-chan struct{}) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

var (
	portMu sync.Mutex
	taken  = map[int]bool{}
)

// freeAddr is a loopback address free a moment ago, picked at random below the
// kernel's ephemeral range (as keel's internal/freeport does, which this file cannot
// import): neither a bind to port 0 nor an outgoing connection ever lands there.
func freeAddr(t testing.TB) string {
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		if taken[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		taken[port] = true
		return addr
	}
	t.Fatal("testserver: no free loopback port in [20000, 32000)")
	return ""
}
