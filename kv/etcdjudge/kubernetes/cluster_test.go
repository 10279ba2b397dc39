package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// process is a server process started for one judge run, stopped at its cleanup.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProcess runs bin with args, its output in logPath, and stops it (SIGTERM,
// then SIGKILL after 10 s) when the test ends.
func startProcess(t *testing.T, logPath, bin string, args ...string) *process {
	t.Helper()
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); lf.Close(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitReady polls ready every 50 ms until it holds, the process exits, or 30 s pass;
// then the test fails with the process's log.
func (p *process) waitReady(t *testing.T, what string, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		select {
		case <-p.done:
			err = errors.New("the process exited")
		default:
			if ready() {
				return
			}
			if time.Now().After(deadline) {
				err = errors.New("not ready within 30s")
			}
		}
		if err != nil {
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: %v\n%s", what, err, log)
		}
	}
}

// startKeelCluster starts a 3-node keel cluster (plain text, ACLs allow) on free
// loopback ports, n1 bootstrapping and n2, n3 joining through it, waits until each
// node is ready and one leads, and returns the etcd door address of a follower.
func startKeelCluster(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var first string
	var doors []string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		raftAddr, httpAddr, etcdAddr := freeAddr(), freeAddr(), freeAddr()
		args := []string{"agent", "-node-id", id, "-data-dir", filepath.Join(dir, id), "-http-addr", httpAddr,
			"-raft-addr", raftAddr, "-etcd-addr", etcdAddr, "-insecure", "-acl-default", "allow", "-log-level", "warn"}
		if i == 0 {
			args, first = append(args, "-bootstrap"), raftAddr
		} else {
			args = append(args, "-join", first)
		}
		p := startProcess(t, filepath.Join(dir, id+".log"), keelBin, args...)
		p.waitReady(t, "keel "+id, func() bool { return httpReady("http://" + httpAddr + "/readyz") })
		doors = append(doors, etcdAddr)
	}
	var follower string
	for deadline := time.Now().Add(30 * time.Second); follower == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no leader with 3 voters among %v within 30s", doors)
		}
		follower = pickFollower(doors)
	}
	return follower
}

// pickFollower asks each door for its status and returns a door whose node follows
// a leader in a 3-member cluster, or "" when there is none yet.
func pickFollower(doors []string) string {
	var follower string
	leaders := 0
	for _, d := range doors {
		c, err := newClient(d)
		if err != nil {
			return ""
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, d)
		var members *clientv3.MemberListResponse
		if err == nil {
			members, err = c.MemberList(ctx)
		}
		cancel()
		c.Close()
		if err != nil || st.Leader == 0 || len(members.Members) != 3 {
			return ""
		}
		if st.Leader == st.Header.MemberId {
			leaders++
		} else {
			follower = d
		}
	}
	if leaders != 1 {
		return ""
	}
	return follower
}

// etcd34 is Debian's etcd (3.4, package etcd-server), the control.
const etcd34 = "/usr/bin/etcd"

// startEtcd34 runs Debian's etcd as a one-member cluster on free loopback ports and
// returns its client address.
func startEtcd34(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	client, peer := freeAddr(), freeAddr()
	p := startProcess(t, filepath.Join(dir, "etcd.log"), etcd34, "--name", "e34", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e34=http://"+peer, "--quota-backend-bytes", fmt.Sprint(8<<30))
	p.waitReady(t, "etcd 3.4", func() bool {
		c, err := newClient(client)
		if err != nil {
			return false
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = c.Put(ctx, "ready", "1")
		return err == nil
	})
	return client
}

func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
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
