package etcdctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/internal/freeport"
)

// etcdctl34 is etcdctl 3.4 as Debian packages it (etcd-client); CI installs it and
// sets KEEL_ETCDCTL34_STRICT, so that its absence fails there and skips elsewhere.
const etcdctl34 = "/usr/bin/etcdctl"

// TestWatchOutlivesLeaderKill (issue #35 item 3): `etcdctl watch` through a follower of
// a 3-node keel (processes) survives the leader's SIGKILL, as it does on etcd: the
// election is shorter than etcd's require-leader grace (3 election timeouts), so
// the watch is not canceled with "no leader", and it prints every write made once the
// new leader is elected. etcdctl 3.7 (built by TestMain) and etcdctl 3.4.
func TestWatchOutlivesLeaderKill(t *testing.T) {
	for _, v := range []struct{ name, bin string }{{"3.7", etcdctlBin}, {"3.4", etcdctl34}} {
		t.Run(v.name, func(t *testing.T) {
			if v.bin == etcdctl34 {
				need34(t)
			}
			watchThroughLeaderKill(t, v.bin)
		})
	}
}

// need34 skips without etcdctl 3.4, or fails under KEEL_ETCDCTL34_STRICT (CI).
func need34(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(etcdctl34); err != nil {
		if os.Getenv("KEEL_ETCDCTL34_STRICT") != "" {
			t.Fatalf("etcdctl 3.4: %v (KEEL_ETCDCTL34_STRICT is set)", err)
		}
		t.Skipf("etcdctl 3.4 not installed (%v); the Debian package etcd-client has it", err)
	}
}

func watchThroughLeaderKill(t *testing.T, bin string) {
	nodes := startKeelCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lead := -1
	for deadline := time.Now().Add(20 * time.Second); lead < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		lead = leaderOf(ctx, nodes, -1)
	}
	if lead < 0 {
		t.Fatal("no leader within 20s")
	}
	via := (lead + 1) % len(nodes)
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{nodes[(lead+2)%len(nodes)].etcdAddr, nodes[via].etcdAddr},
		DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	cmd := exec.Command(bin, "--endpoints", nodes[via].etcdAddr, "watch", "--prefix", "w/")
	if bin == etcdctl34 {
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3") // 3.4 reads it; 3.7 warns of it
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
	}()
	// The watch is up once it prints a write made after it started.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "w/before"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watch printed no write within 20s:\n%s", out.String())
		}
		if _, err := cl.Put(ctx, "w/before", "x"); err != nil {
			t.Fatal(err)
		}
	}

	nodes[lead].kill()
	killedAt := time.Now()
	next := -1
	for deadline := time.Now().Add(20 * time.Second); next < 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		next = leaderOf(ctx, nodes, lead)
	}
	if next < 0 {
		t.Fatal("no new leader within 20s of the leader's kill")
	}
	t.Logf("new leader %d after %v", next, time.Since(killedAt).Round(time.Millisecond))
	const writes = 5
	for n := range writes {
		if _, err := cl.Put(ctx, fmt.Sprintf("w/after%d", n), "x"); err != nil {
			t.Fatalf("put %d after the election: %v", n, err)
		}
	}
	want := fmt.Sprintf("w/after%d", writes-1)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), want); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("etcdctl watch through a follower exited (%v) %v after the leader's kill:\n%s",
				err, time.Since(killedAt).Round(time.Millisecond), out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdctl watch through a follower printed not every write after the election within 20s:\n%s", out.String())
		}
	}
	for n := range writes {
		if k := fmt.Sprintf("w/after%d\n", n); !strings.Contains(out.String(), k) {
			t.Errorf("the watch missed %q:\n%s", k, out.String())
		}
	}
	if s := out.String(); strings.Contains(s, "no leader") {
		t.Errorf("the watch reported no leader:\n%s", s)
	}
}

// keelNode is one keel process of a cluster started by startKeelCluster.
type keelNode struct {
	etcdAddr string
	cmd      *exec.Cmd
	done     chan struct{}
}

// kill sends SIGKILL and waits for the process to go.
func (n *keelNode) kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// startKeelCluster starts size keel processes (plain text, ACLs allow) on free
// loopback ports, the first bootstrapping the cluster and the others joining it,
// and waits until each is ready.
func startKeelCluster(t *testing.T, size int) []*keelNode {
	t.Helper()
	dir := t.TempDir()
	var nodes []*keelNode
	var first string
	for i := range size {
		id := fmt.Sprintf("n%d", i+1)
		raftAddr, httpAddr, etcdAddr := freeport.Addr(), freeport.Addr(), freeport.Addr()
		args := []string{"agent", "-node-id", id, "-data-dir", filepath.Join(dir, id), "-http-addr", httpAddr,
			"-raft-addr", raftAddr, "-etcd-addr", etcdAddr, "-insecure", "-acl-default", "allow"}
		if i == 0 {
			args, first = append(args, "-bootstrap"), raftAddr
		} else {
			args = append(args, "-join", first)
		}
		lf, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(keelBin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n := &keelNode{etcdAddr: etcdAddr, cmd: cmd, done: make(chan struct{})}
		go func() { cmd.Wait(); lf.Close(); close(n.done) }()
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-n.done:
			case <-time.After(10 * time.Second):
				n.kill()
			}
		})
		if err := waitFor(func() bool { return httpReady("http://" + httpAddr + "/readyz") }, n.done, 30*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, id+".log"))
			t.Fatalf("keel %s: %v\n%s", id, err, log)
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// leaderOf is the index of the node that says it leads (skipping skip), or -1.
func leaderOf(ctx context.Context, nodes []*keelNode, skip int) int {
	for i, n := range nodes {
		if i == skip {
			continue
		}
		c, err := newClient(n.etcdAddr)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Status(sctx, n.etcdAddr)
		cancel()
		c.Close()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// syncBuffer is an output both of a process's streams write to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
