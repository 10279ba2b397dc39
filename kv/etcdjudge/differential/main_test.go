package differential

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

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/keel-kv/keel/internal/freeport"
)

// The two servers every sequence runs against: a one-node keel (`keel agent -dev`
// built from this tree, its etcd door on) and an embedded etcd 3.7 (server/v3/embed),
// each with a fresh data directory.
var keelSrv, etcdSrv *server

// server is one side of the comparison.
type server struct {
	name string
	c    *clientv3.Client
	addr string // the client port: gRPC and the JSON gateway (gateway_test.go)
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "etcddiff-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	stopKeel, err := startKeel(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keel:", err)
		return 1
	}
	defer stopKeel()
	stopEtcd, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	defer stopEtcd()
	return m.Run()
}

// startKeel builds keel from this tree and starts `keel agent -dev` with its etcd
// door on free loopback ports; it returns once the door answers with a leader and
// /readyz is 200.
func startKeel(dir string) (func(), error) {
	keelBin = filepath.Join(dir, "keel")
	build := exec.Command("go", "build", "-o", keelBin, "./cmd/keel")
	build.Dir = "../../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	c, etcdAddr, _, stop, err := launchKeel(dir)
	if err != nil {
		return nil, err
	}
	keelSrv = &server{name: "keel", c: c, addr: etcdAddr}
	return stop, nil
}

// keelBin is the keel binary startKeel built.
var keelBin string

// launchKeel starts `keel agent -dev` (with extra flags) with its data and log under
// dir and its etcd door on, on free loopback ports; it returns once the door answers
// with a leader and /readyz is 200. stop closes c and ends the process.
func launchKeel(dir string, extra ...string) (c *clientv3.Client, etcdAddr, httpAddr string, stop func(), err error) {
	etcdAddr, httpAddr = freeport.Addr(), freeport.Addr()
	logPath := filepath.Join(dir, "keel.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, "", "", nil, err
	}
	args := append([]string{"agent", "-dev", "-data-dir", filepath.Join(dir, "keel-data"), "-http-addr", httpAddr,
		"-raft-addr", freeport.Addr(), "-etcd-addr", etcdAddr}, extra...)
	cmd := exec.Command(keelBin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, "", "", nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); lf.Close(); close(done) }()
	stop = func() {
		if c != nil {
			c.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	c, err = newClient(etcdAddr)
	if err == nil {
		err = waitReady(c, etcdAddr, httpAddr, done)
	}
	if err != nil {
		stop()
		log, _ := os.ReadFile(logPath)
		return nil, "", "", nil, fmt.Errorf("%w\n%s", err, log)
	}
	return c, etcdAddr, httpAddr, stop, nil
}

// waitReady polls Status until keel reports a leader and its /readyz is 200. A node
// that runs -acl-default deny answers a tokenless Status "user name is empty", as etcd
// with auth on does: there /readyz alone says it (it is 200 only with a leader).
func waitReady(c *clientv3.Client, etcdAddr, httpAddr string, done chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("keel exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, etcdAddr)
		cancel()
		if errors.Is(err, rpctypes.ErrUserEmpty) || err == nil && st.Leader != 0 {
			resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + httpAddr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no leader within 30s")
}

// startEtcd starts an embedded one-member etcd on free loopback ports.
func startEtcd(dir string) (func(), error) {
	c, _, stop, err := launchEtcd(dir)
	if err != nil {
		return nil, err
	}
	etcdSrv = &server{name: "etcd", c: c, addr: c.Endpoints()[0]}
	return stop, nil
}

// launchEtcd starts an embedded one-member etcd on free loopback ports, with its
// data under dir; stop closes c and the server.
func launchEtcd(dir string) (c *clientv3.Client, e *embed.Etcd, stop func(), err error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.LogLevel = "error"
	client, peer := freeport.Addr(), freeport.Addr()
	cu, _ := url.Parse("http://" + client)
	pu, _ := url.Parse("http://" + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err = embed.StartEtcd(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, nil, nil, errors.New("etcd not ready within 30s")
	}
	c, err = newClient(client)
	if err != nil {
		e.Close()
		return nil, nil, nil, err
	}
	return c, e, func() { c.Close(); e.Close() }, nil
}

func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}
