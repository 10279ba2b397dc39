//go:build patroni

package patroni

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
)

// Patroni's timing for these runs: the leader key lives ttl seconds, a member loops
// every loopWait, and a DCS call is retried for retryTimeout (Patroni demotes a leader
// that cannot reach its DCS for that long, so it must outlast a DCS election).
const (
	ttl          = 20
	loopWait     = 2
	retryTimeout = 8
)

// TestPatroniOnEtcd runs the script on etcd 3.4: the judge of the judge.
func TestPatroniOnEtcd(t *testing.T) {
	bin := "/usr/bin/etcd"
	if _, err := os.Stat(bin); err != nil {
		need(t, "etcd-server (/usr/bin/etcd)")
	}
	run(t, startEtcd(t, bin))
}

// TestPatroniOnKeel runs the same script on keel's etcd door.
func TestPatroniOnKeel(t *testing.T) {
	bin := os.Getenv("KEEL_BIN")
	if bin == "" {
		need(t, "KEEL_BIN (make test-patroni sets it)")
	}
	run(t, startKeel(t, bin))
}

// need skips, or fails when KEEL_PATRONI_STRICT is set (CI): a judge that cannot run
// must not pass quietly.
func need(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("KEEL_PATRONI_STRICT") != "" {
		t.Fatalf("cannot run: no %s", what)
	}
	t.Skipf("no %s", what)
}

func run(t *testing.T, d *dcs) {
	for _, p := range []string{"/usr/bin/patroni", "/usr/lib/postgresql/15/bin/postgres", "/usr/sbin/runuser"} {
		if _, err := os.Stat(p); err != nil {
			need(t, p)
		}
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		need(t, "postgres user")
	}
	dir := scratch(t, pg)
	members := []*member{newMember(t, dir, "pg1", d), newMember(t, dir, "pg2", d)}
	for _, m := range members {
		m.start(t)
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.proc.kill()
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", m.name, tail(m.proc.log, 60))
			}
		}
	})

	lead, repl := waitHealthy(t, members, 3*time.Minute)
	t.Logf("PostgreSQL leader %s, replica %s streaming", lead.name, repl.name)

	// (b) The DCS loses its leader: Patroni keeps its leader and does not fail over.
	victim := d.leader(t)
	t.Logf("killing the %s leader %s", d.kind, d.procs[victim].name)
	d.procs[victim].kill()
	deadline := time.Now().Add(time.Duration(ttl+2*loopWait) * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range members {
			st, err := m.status()
			if err != nil {
				continue // a member busy for a moment; a demotion shows as a role
			}
			if m == lead && st.Role != "master" && st.Role != "primary" {
				t.Fatalf("%s demoted itself (%s, %s) after the %s leader died", m.name, st.Role, st.State, d.kind)
			}
			if m == repl && (st.Role == "master" || st.Role == "primary") {
				t.Fatalf("%s promoted (a failover) after the %s leader died", m.name, d.kind)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("no demotion, no failover for %ds after the %s leader died", ttl+2*loopWait, d.kind)
	d.restart(t, victim)

	// (a) The PostgreSQL leader's Patroni and postmaster die: the replica is promoted
	// within the leader key's TTL (plus a loop and the promotion itself).
	killed := time.Now()
	lead.proc.kill()
	limit := time.Duration(ttl+2*loopWait+10) * time.Second
	for {
		if repl.isLeader() {
			break
		}
		if time.Since(killed) > limit {
			t.Fatalf("%s not promoted %v after the leader died", repl.name, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%s promoted %v after %s died (ttl %ds)", repl.name, time.Since(killed).Round(100*time.Millisecond), lead.name, ttl)
}

// waitHealthy waits for one leader and a replica streaming from it.
func waitHealthy(t *testing.T, members []*member, limit time.Duration) (lead, repl *member) {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		lead, repl = nil, nil
		for _, m := range members {
			if m.isLeader() {
				lead = m
			} else {
				repl = m
			}
		}
		if lead != nil && repl != nil {
			st, err := lead.status()
			if err == nil {
				for _, r := range st.Replication {
					if r.ApplicationName == repl.name && r.State == "streaming" {
						return lead, repl
					}
				}
				last = fmt.Sprintf("leader %s replication %+v", lead.name, st.Replication)
			}
		}
		time.Sleep(time.Second)
	}
	for _, m := range members {
		t.Logf("%s log:\n%s", m.name, tail(m.proc.log, 40))
	}
	t.Fatalf("no leader with a streaming replica after %v (%s)", limit, last)
	return nil, nil
}

// scratch is a dir the postgres user owns (t.TempDir's parents are root's, 0700).
func scratch(t *testing.T, pg *user.User) string {
	dir, err := os.MkdirTemp("", "keel-patroni-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

type member struct {
	name             string
	dir, config      string
	restPort, pgPort int
	proc             *proc
}

func newMember(t *testing.T, dir, name string, d *dcs) *member {
	m := &member{name: name, dir: filepath.Join(dir, name), restPort: port(t), pgPort: port(t)}
	m.config = filepath.Join(dir, name+".yml")
	cfg := fmt.Sprintf(`scope: keel-judge
name: %[1]s
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd3:
  hosts: %[3]s
  protocol: http
bootstrap:
  dcs:
    ttl: %[6]d
    loop_wait: %[7]d
    retry_timeout: %[8]d
    maximum_lag_on_failover: 1048576
  initdb:
    - encoding: UTF8
postgresql:
  listen: 127.0.0.1:%[4]d
  connect_address: 127.0.0.1:%[4]d
  data_dir: %[5]s/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: %[5]s/pgpass
  authentication:
    replication:
      username: replicator
      password: rep-pass
    superuser:
      username: postgres
      password: pg-pass
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 md5
    - host all all 127.0.0.1/32 md5
  parameters:
    unix_socket_directories: %[5]s
`, name, m.restPort, d.hosts(), m.pgPort, m.dir, ttl, loopWait, retryTimeout)
	if err := os.WriteFile(m.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *member) start(t *testing.T) {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "postgres:postgres", m.dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	m.proc = startProc(t, filepath.Dir(m.dir), m.name, "/usr/sbin/runuser", "-u", "postgres", "--", "/usr/bin/patroni", m.config)
}

// patroniStatus is the part of GET /patroni this judge reads.
type patroniStatus struct {
	State       string `json:"state"`
	Role        string `json:"role"`
	Replication []struct {
		ApplicationName string `json:"application_name"`
		State           string `json:"state"`
	} `json:"replication"`
}

func (m *member) status() (patroniStatus, error) {
	var st patroniStatus
	resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d/patroni", m.restPort))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// isLeader: GET /leader answers 200 on the member holding the leader lock.
func (m *member) isLeader() bool {
	resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d/leader", m.restPort))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func port(t *testing.T) int {
	p, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// proc is a process in its own process group: kill takes the group (Patroni and the
// PostgreSQL processes it started) down with SIGKILL.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, dir, name string, argv ...string) *proc {
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	// A postmaster outlives its killed parent group only if it left it; give its
	// backends a moment to see it gone.
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
