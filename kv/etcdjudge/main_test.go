package etcdjudge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keel-kv/keel/internal/freeport"
)

// keelBin is the keel binary TestMain builds from this tree.
var keelBin string

// single is a one-node keel (keel agent -dev) with the etcd door on, shared by the
// judges that need no cluster of their own; firstRevision is the revision its etcd
// door reported before any judge wrote.
var (
	single        *node
	firstRevision int64
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "etcdjudge-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	keelBin = filepath.Join(dir, "keel")
	build := exec.Command("go", "build", "-o", keelBin, "./cmd/keel")
	build.Dir = "../.."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build keel:", err)
		return 1
	}
	single, err = startNode(filepath.Join(dir, "single"), "-dev")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer single.stop()
	if firstRevision, err = single.revision(); err != nil {
		fmt.Fprintln(os.Stderr, "first revision:", err)
		return 1
	}
	return m.Run()
}

// node is one keel agent process.
type node struct {
	cmd      *exec.Cmd
	done     chan struct{}
	etcdAddr string
	httpAddr string
	logPath  string
	// tls, when set, is the client side of a TLS node (CA, client certificate).
	tls *tls.Config
}

// startNode starts keel agent with the given extra flags on free loopback ports and
// waits until its etcd door answers Status with a leader.
func startNode(dir string, extra ...string) (*node, error) {
	return startNodeRaft(dir, freeport.Addr(), extra...)
}

// startNodeRaft is startNode with the Raft address given.
func startNodeRaft(dir, raftAddr string, extra ...string) (*node, error) {
	return startNodeTLS(dir, raftAddr, nil, extra...)
}

// startNodeTLS is startNodeRaft for a node whose clients use tc (nil: plain text).
func startNodeTLS(dir, raftAddr string, tc *tls.Config, extra ...string) (*node, error) {
	n, args, err := launchNode(dir, raftAddr, tc, extra...)
	if err != nil {
		return nil, err
	}
	if err := n.waitLeader(30 * time.Second); err != nil {
		n.stop()
		log, _ := os.ReadFile(n.logPath)
		return nil, fmt.Errorf("keel %v: %w\n%s", args, err, log)
	}
	return n, nil
}

// launchNode starts the keel process of startNodeTLS and returns at once, with the
// process's arguments.
func launchNode(dir, raftAddr string, tc *tls.Config, extra ...string) (*node, []string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	n := &node{etcdAddr: freeport.Addr(), httpAddr: freeport.Addr(), logPath: filepath.Join(dir, "keel.log"),
		done: make(chan struct{}), tls: tc}
	args := append([]string{"agent", "-data-dir", filepath.Join(dir, "data"), "-http-addr", n.httpAddr,
		"-raft-addr", raftAddr, "-etcd-addr", n.etcdAddr}, extra...)
	lf, err := os.Create(n.logPath)
	if err != nil {
		return nil, nil, err
	}
	n.cmd = exec.Command(keelBin, args...)
	n.cmd.Stdout, n.cmd.Stderr = lf, lf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		lf.Close()
		return nil, nil, err
	}
	go func() { n.cmd.Wait(); lf.Close(); close(n.done) }()
	return n, args, nil
}

// client is an etcd client of the node.
func (n *node) client(opts ...func(*clientv3.Config)) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{n.etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: n.tls}
	for _, o := range opts {
		o(&cfg)
	}
	return clientv3.New(cfg)
}

// waitLeader polls Maintenance.Status until the node reports a leader. A node that
// enforces ACLs (-acl-default deny, no token yet) refuses Status to a caller without a
// token, as etcd 3.7 with auth on does: /readyz (a leader is known) says it then.
func (n *node) waitLeader(limit time.Duration) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-n.done:
			return errors.New("the process exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, n.etcdAddr)
		cancel()
		if err == nil && st.Leader != 0 && n.ready() {
			return nil
		}
		if errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) && n.ready() {
			return nil
		}
		last = err
		sleep()
	}
	return fmt.Errorf("no leader within %v (last error: %v)", limit, last)
}

// ready reports whether the node's /readyz answers 200 (it has a leader and the
// cluster's secret and genesis record).
func (n *node) ready() bool {
	c := http.Client{Timeout: time.Second}
	scheme := "http://"
	if n.tls != nil {
		c.Transport = &http.Transport{TLSClientConfig: n.tls}
		scheme = "https://"
	}
	resp, err := c.Get(scheme + n.httpAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// revision is the node's current revision as its etcd door reports it.
func (n *node) revision() (int64, error) {
	c, err := n.client()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "etcdjudge-nothing")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// stop ends the process: SIGTERM, then SIGKILL after 10 s.
func (n *node) stop() {
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
}

// newClient is a client of the single node, closed with the test.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := single.client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx is bounded by 30 s and ends with the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sleep is the pause between two polls of a condition.
func sleep() { time.Sleep(50 * time.Millisecond) }
