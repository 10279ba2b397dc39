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

// kill sends SIGKILL and waits until the process is gone.
func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// waitReady polls ready every 50 ms until it holds, the process exits, or 30 s pass;
// then the test fails with the process's log.
func (p *process) waitReady(t *testing.T, what string, ready func() bool) {
	p.waitReadyWithin(t, what, 30*time.Second, ready)
}

func (p *process) waitReadyWithin(t *testing.T, what string, within time.Duration, ready func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		var err error
		select {
		case <-p.done:
			err = errors.New("the process exited")
		default:
			if ready() {
				return
			}
			if time.Now().After(deadline) {
				err = fmt.Errorf("not ready within %v", within)
			}
		}
		if err != nil {
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: %v\n%s", what, err, tail(string(log), 100))
		}
	}
}

// member is one server of a cluster under test: keel or etcd, restartable on its
// data directory. Only the test goroutine that owns the cluster may start or kill it.
type member struct {
	name    string
	door    string   // its etcd client address, host:port
	bin     string   // keel or etcd
	args    []string // for its first start
	restart []string // for every later start, on the same data
	logDir  string
	ready   func() bool
	proc    *process
	starts  int
}

// start runs the member (its first or a later incarnation), its log in
// <logDir>/<name>.<starts>.log; it does not wait for readiness.
func (m *member) start(t *testing.T) {
	t.Helper()
	args := m.args
	if m.starts > 0 {
		args = m.restart
	}
	m.proc = startProcess(t, filepath.Join(m.logDir, fmt.Sprintf("%s.%d.log", m.name, m.starts)), m.bin, args...)
	m.starts++
}

// cluster is a set of members that speak the etcd v3 API; its doors are the
// addresses a client (kube-apiserver's --etcd-servers) is given.
type cluster struct {
	kind    string // "keel" or "etcd 3.4"
	members []*member
}

func (c *cluster) doors() []string {
	var ds []string
	for _, m := range c.members {
		ds = append(ds, m.door)
	}
	return ds
}

// waitLeader waits until every member answers, all count len(members) members and
// exactly one leads, and returns the leader and a follower (nil with one member).
func (c *cluster) waitLeader(t *testing.T, within time.Duration) (leader, follower *member) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		if l, f, ok := c.roles(); ok {
			return l, f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no leader with %d members among %v within %v", c.kind, len(c.members), c.doors(), within)
		}
	}
}

// roles asks each member for its status; ok when all answer, all count every member,
// and exactly one of them leads.
func (c *cluster) roles() (leader, follower *member, ok bool) {
	for _, m := range c.members {
		cl, err := newClient(m.door)
		if err != nil {
			return nil, nil, false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cl.Status(ctx, m.door)
		var members *clientv3.MemberListResponse
		if err == nil {
			members, err = cl.MemberList(ctx)
		}
		cancel()
		cl.Close()
		if err != nil || st.Leader == 0 || len(members.Members) != len(c.members) {
			return nil, nil, false
		}
		if st.Leader != st.Header.MemberId {
			follower = m
		} else if leader != nil {
			return nil, nil, false
		} else {
			leader = m
		}
	}
	return leader, follower, leader != nil
}

// killAndRestart SIGKILLs m, waits down (the survivors keep serving), starts it again
// on its data and waits until it is ready and the cluster has a leader again.
func (c *cluster) killAndRestart(t *testing.T, m *member, down time.Duration) {
	t.Helper()
	m.proc.kill()
	time.Sleep(down)
	m.start(t)
	m.proc.waitReadyWithin(t, c.kind+" "+m.name+" restarted", time.Minute, m.ready)
	c.waitLeader(t, time.Minute)
}

// startKeelCluster starts a 3-node keel cluster (plain text, ACLs allow) on free
// loopback ports, n1 bootstrapping and n2, n3 joining through it, and waits until
// each node is ready and one leads. A restarted node runs without -bootstrap or
// -join, on its data.
func startKeelCluster(t *testing.T) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{kind: "keel"}
	var first string
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		raftAddr, httpAddr, etcdAddr := freeAddr(), freeAddr(), freeAddr()
		args := []string{"agent", "-node-id", id, "-data-dir", filepath.Join(dir, id), "-http-addr", httpAddr,
			"-raft-addr", raftAddr, "-etcd-addr", etcdAddr, "-insecure", "-acl-default", "allow", "-log-level", "warn"}
		m := &member{name: id, door: etcdAddr, bin: keelBin, restart: args, logDir: dir,
			ready: func() bool { return httpReady("http://" + httpAddr + "/readyz") }}
		if i == 0 {
			m.args, first = append(args, "-bootstrap"), raftAddr
		} else {
			m.args = append(args, "-join", first)
		}
		m.start(t)
		m.proc.waitReady(t, "keel "+id, m.ready)
		c.members = append(c.members, m)
	}
	c.waitLeader(t, 30*time.Second)
	return c
}

// etcd34 is Debian's etcd (3.4, package etcd-server), the control.
const etcd34 = "/usr/bin/etcd"

// startEtcd34Cluster runs Debian's etcd as an n-member cluster on free loopback ports
// and waits until it has a leader. A restarted member runs with the same flags (etcd
// ignores --initial-cluster once its data directory exists).
func startEtcd34Cluster(t *testing.T, n int) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{kind: "etcd 3.4"}
	var initial string
	peers := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		peers[name] = freeAddr()
		if initial != "" {
			initial += ","
		}
		initial += name + "=http://" + peers[name]
	}
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		client, peer := freeAddr(), peers[name]
		args := []string{"--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
			"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
			"--initial-cluster", initial, "--quota-backend-bytes", fmt.Sprint(8 << 30)}
		m := &member{name: name, door: client, bin: etcd34, args: args, restart: args, logDir: dir,
			ready: func() bool { return etcdReady(client) }}
		m.start(t) // all at once: a member serves only once a quorum is up
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.proc.waitReady(t, "etcd 3.4 "+m.name, m.ready)
	}
	c.waitLeader(t, 30*time.Second)
	return c
}

// skipWithoutEtcd34 skips the control when Debian's etcd is absent, or fails the test
// when KEEL_K8S_STRICT=1.
func skipWithoutEtcd34(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(etcd34); err != nil {
		if os.Getenv("KEEL_K8S_STRICT") == "1" {
			t.Fatalf("the control needs Debian's etcd-server: %v", err)
		}
		t.Skipf("no control run: %v (apt-get install etcd-server; KEEL_K8S_STRICT=1 fails instead)", err)
	}
}

// etcdReady: the member at addr answers a linearizable read.
func etcdReady(addr string) bool {
	c, err := newClient(addr)
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Get(ctx, "ready")
	return err == nil
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
