package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/client"
)

// ProcConfig configures a cluster of keel processes on loopback.
type ProcConfig struct {
	Bin   string // the keel binary
	Dir   string // work dir: one data dir and one log per node
	Nodes int    // initial voters
	// Subnet is the second octet of the nodes' loopback IPs: node i listens on
	// 127.<Subnet>.0.<10+i>, so faults can tell nodes apart by address.
	Subnet int
	// DiskSize, when > 0, mounts a tmpfs of that many bytes as the data dir of the
	// first node (needs root; see DiskNode, FillDisk).
	DiskSize int64
	// LogFaults starts every node with -test-log-faults (a control file per node), so
	// FailLog can inject I/O errors into its Raft log.
	LogFaults bool
	// ExtraArgs are added to every node's agent command line (SetRelease overrides
	// them, and the binary, per node).
	ExtraArgs []string
	// TLS runs every node with TLS on every port and client certificates required
	// (tls.go); the harness's clients present one.
	TLS bool
	// Gossip starts every node with gossip on (-gossip-addr, -bootstrap-expect Nodes,
	// -join of every other node's gossip address: the same command line on each), as
	// key migrations need (members announce what they support in gossip metadata).
	// Off: the first node -bootstraps and the others -join its Raft address.
	Gossip bool
	// Etcd serves the etcd v3 gRPC API on every node (-etcd-addr, a port of the node's
	// own IP; see EtcdAddr), for workloads that drive keel through etcd's client.
	Etcd bool
	// Remover removes a voter through some node's API with the cluster's ACL token
	// ("" for none) (nil: FaultRemove unsupported).
	Remover func(ctx context.Context, httpAddr, id, token string) error
	// ACL runs the cluster with access control on, when the binary has it: nodes keep
	// their default (-acl-default deny), the harness bootstraps the ACL system once the
	// first node leads, and every client of the harness sends the management token
	// (Token). Off: nodes run -acl-default allow and clients send no token.
	ACL  bool
	Logf func(format string, args ...any)
}

// DefaultProcConfig returns a 3-node config; Bin and Dir must be set.
func DefaultProcConfig() ProcConfig {
	return ProcConfig{Nodes: 3, Subnet: 77, Logf: func(string, ...any) {}}
}

// Validate names the bad field.
func (c ProcConfig) Validate() error {
	switch {
	case c.Bin == "":
		return errors.New("chaos: ProcConfig.Bin is empty")
	case c.Dir == "":
		return errors.New("chaos: ProcConfig.Dir is empty")
	case c.Nodes < 1 || c.Nodes > 9:
		return fmt.Errorf("chaos: ProcConfig.Nodes = %d, want 1..9", c.Nodes)
	case c.Subnet < 1 || c.Subnet > 254:
		return fmt.Errorf("chaos: ProcConfig.Subnet = %d, want 1..254", c.Subnet)
	}
	return nil
}

// procNode is one keel process (or the memory of one that is stopped).
type procNode struct {
	id, ip                       string
	httpAddr, raftAddr, advAddr  string
	gossipAddr                   string // "" without ProcConfig.Gossip
	etcdAddr                     string // "" without ProcConfig.Etcd
	dataDir, logPath, fillerPath string
	tmpfs                        bool
	cl                           *client.Client
	bin                          string   // "" = ProcConfig.Bin
	extra                        []string // nil = ProcConfig.ExtraArgs

	cmd         *exec.Cmd
	exited      chan struct{}
	exitErr     error
	incarnation int
	running     bool
	paused      bool
	stopping    bool // the harness is stopping it: an exit is expected
	crashed     bool
	removed     bool
}

// ProcCluster runs keel as real processes, each on its own loopback IP, with a
// fault-injecting proxy in front of every Raft port (what each node advertises).
type ProcCluster struct {
	cfg ProcConfig
	net *Network
	tls *harnessTLS // nil: plain text (-insecure)

	mu struct {
		sync.Mutex
		nodes map[string]*procNode
		next  int
		token string // ACL management token, once bootstrapped (ProcConfig.ACL)
	}
}

var _ Cluster = (*ProcCluster)(nil)

// StartProcCluster starts cfg.Nodes processes: the first bootstraps, the others join
// it; it returns once all are voters and ready.
func StartProcCluster(ctx context.Context, cfg ProcConfig) (*ProcCluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	c := &ProcCluster{cfg: cfg}
	c.mu.nodes = map[string]*procNode{}
	c.net = NewNetwork(c.identify)
	if cfg.TLS {
		h, err := newHarnessTLS(cfg.Bin, filepath.Join(cfg.Dir, "tls"))
		if err != nil {
			return nil, fmt.Errorf("chaos: certificates: %w", err)
		}
		c.tls = h
	}
	if cfg.Gossip {
		if cfg.TLS {
			return nil, errors.New("chaos: a gossip cluster with TLS is not built (it needs -encrypt)")
		}
		return c.startGossip(ctx)
	}
	var ids []string
	for i := 0; i < cfg.Nodes; i++ {
		n, err := c.newNode(i == 0 && cfg.DiskSize > 0)
		if err != nil {
			c.Close()
			return nil, err
		}
		var join []string
		if i > 0 {
			join = []string{c.node(ids[0]).advAddr}
		}
		if err := c.launch(n, i == 0, join); err != nil {
			c.Close()
			return nil, err
		}
		ids = append(ids, n.id)
		if i == 0 {
			// Bootstrap first (its client retries until the node leads): under ACLs a
			// node shows a caller without a token only the public view of its status,
			// which names no leader, so WaitLeader needs the token.
			if err := c.bootstrapACL(ctx, n); err != nil {
				c.Close()
				return nil, err
			}
			if _, err := WaitLeader(ctx, c); err != nil {
				c.Close()
				return nil, fmt.Errorf("first node: %w", err)
			}
		}
	}
	if err := WaitVoters(ctx, c, ids); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startGossip allocates every node, then starts them all with the same gossip command
// line; it returns once all are voters and ready.
func (c *ProcCluster) startGossip(ctx context.Context) (*ProcCluster, error) {
	var nodes []*procNode
	for i := 0; i < c.cfg.Nodes; i++ {
		n, err := c.newNode(i == 0 && c.cfg.DiskSize > 0)
		if err != nil {
			c.Close()
			return nil, err
		}
		nodes = append(nodes, n)
	}
	var ids []string
	for _, n := range nodes {
		if err := c.launch(n, false, nil); err != nil {
			c.Close()
			return nil, err
		}
		ids = append(ids, n.id)
	}
	if err := WaitVoters(ctx, c, ids); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Name implements Cluster.
func (c *ProcCluster) Name() string { return "process" }

// Network is the proxy network in front of the Raft ports.
func (c *ProcCluster) Network() *Network { return c.net }

// Unidentified counts proxied connections whose dialing node could not be found (link
// faults could not apply to them).
func (c *ProcCluster) Unidentified() []string { return c.net.Unidentified() }

// Net implements Cluster.
func (c *ProcCluster) Net() NetFaults { return c.net }

func (c *ProcCluster) node(id string) *procNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.nodes[id]
}

// newNode allocates a node: ID, loopback IP, ports, data dir, proxy.
func (c *ProcCluster) newNode(tmpfs bool) (*procNode, error) {
	c.mu.Lock()
	c.mu.next++
	k := c.mu.next
	c.mu.Unlock()
	id := fmt.Sprintf("n%d", k)
	ip := fmt.Sprintf("127.%d.0.%d", c.cfg.Subnet, 10+k)
	n := &procNode{id: id, ip: ip, dataDir: filepath.Join(c.cfg.Dir, id), logPath: filepath.Join(c.cfg.Dir, id+".log")}
	n.fillerPath = filepath.Join(n.dataDir, "chaos-filler")
	ports, err := freePorts(ip, 5)
	if err != nil {
		return nil, err
	}
	if c.cfg.Etcd {
		n.etcdAddr = net.JoinHostPort(ip, fmt.Sprint(ports[4]))
	}
	n.httpAddr = net.JoinHostPort(ip, fmt.Sprint(ports[0]))
	n.raftAddr = net.JoinHostPort(ip, fmt.Sprint(ports[1]))
	if c.cfg.Gossip {
		n.gossipAddr = net.JoinHostPort(ip, fmt.Sprint(ports[3]))
	}
	if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if tmpfs {
		if err := mountTmpfs(n.dataDir, c.cfg.DiskSize); err != nil {
			return nil, err
		}
		n.tmpfs = true
	}
	adv, err := c.net.Listen(id, net.JoinHostPort(ip, fmt.Sprint(ports[2])), n.raftAddr)
	if err != nil {
		return nil, err
	}
	n.advAddr = adv
	if c.tls != nil {
		if err := c.tls.node(id, ip, n.httpAddr); err != nil {
			return nil, err
		}
	}
	n.cl = newNodeClient(n.httpAddr, c.Token())
	c.mu.Lock()
	c.mu.nodes[id] = n
	c.mu.Unlock()
	return n, nil
}

// freePorts finds n TCP ports on ip that were free a moment ago, outside the kernel's
// ephemeral range (see package freeport).
func freePorts(ip string, n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freeport.TCP(ip)
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// launch starts the node's process. bootstrap/join only matter on first start.
func (c *ProcCluster) launch(n *procNode, bootstrap bool, join []string) error {
	args := []string{"agent", "-node-id", n.id, "-data-dir", n.dataDir,
		"-http-addr", n.httpAddr, "-raft-addr", n.raftAddr, "-advertise", n.advAddr}
	if n.gossipAddr != "" {
		join = nil
		c.mu.Lock()
		for _, o := range c.mu.nodes {
			if o != n && o.gossipAddr != "" && !o.removed {
				join = append(join, o.gossipAddr)
			}
		}
		c.mu.Unlock()
		sort.Strings(join)
		args = append(args, "-gossip-addr", n.gossipAddr, "-bootstrap-expect", fmt.Sprint(c.cfg.Nodes))
	} else if bootstrap {
		args = append(args, "-bootstrap")
	}
	if len(join) > 0 {
		args = append(args, "-join", strings.Join(join, ","))
	}
	if c.cfg.LogFaults {
		args = append(args, "-test-log-faults", c.logControl(n.id))
	}
	if n.etcdAddr != "" {
		args = append(args, "-etcd-addr", n.etcdAddr)
	}
	c.mu.Lock()
	bin, extra := c.cfg.Bin, c.cfg.ExtraArgs
	if n.bin != "" {
		bin, extra = n.bin, n.extra
	}
	c.mu.Unlock()
	if !c.cfg.ACL {
		args = append(args, aclArgs(bin)...)
	}
	args = append(args, extra...)
	if c.tls != nil {
		args = append(args, c.tls.args(n.id)...)
	} else {
		args = append(args, securityArgs(bin)...)
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node log: %w", err)
	}
	c.mu.Lock()
	inc := n.incarnation
	if n.cmd != nil {
		inc++
	}
	c.mu.Unlock()
	fmt.Fprintf(logf, "=== chaos: %s start incarnation %d at %s: %s %s\n", n.id, inc,
		time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Started under c.mu and running before c.mu is let go: identify lists the running
	// nodes' processes under c.mu, after the proxy accepted a connection, so the
	// process that dialed it is always in the list. Started outside, a new incarnation
	// could dial a peer before it was listed, while this goroutine waited for the lock
	// on a loaded box, and its connection was unidentified ("pids [19902 19916 19925
	// 19858]": n2's new 19977 missing, after a kill -9 of n2).
	c.mu.Lock()
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		logf.Close()
		return fmt.Errorf("start %s: %w", n.id, err)
	}
	exited := make(chan struct{})
	n.cmd, n.exited, n.incarnation = cmd, exited, inc
	n.running, n.paused, n.stopping, n.exitErr = true, false, false, nil
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		c.mu.Lock()
		n.running, n.paused, n.exitErr = false, false, err
		if !n.stopping {
			n.crashed = true
			c.cfg.Logf("node %s exited unexpectedly: %v (log %s)", n.id, err, n.logPath)
		}
		c.mu.Unlock()
		close(exited)
	}()
	return nil
}

// identify names the node that dialed a proxied connection: by its source IP when the
// node binds its dialer to its own address, else by which node process owns the
// dialing socket.
func (c *ProcCluster) identify(remote, local net.Addr) string {
	ra, ok1 := remote.(*net.TCPAddr)
	la, ok2 := local.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	c.mu.Lock()
	pids := map[int]string{}
	var list []int
	for id, n := range c.mu.nodes {
		if n.ip == ra.IP.String() {
			c.mu.Unlock()
			return id
		}
		if n.running && n.cmd != nil && n.cmd.Process != nil {
			pids[n.cmd.Process.Pid] = id
			list = append(list, n.cmd.Process.Pid)
		}
	}
	c.mu.Unlock()
	pid, found, ok := socketOwner(ra, la, list)
	switch {
	case ok:
		return pids[pid]
	case !found:
		return SourceGone
	}
	owner, _, _ := socketOwner(ra, la, allPids())
	c.cfg.Logf("proxy: unidentified raft connection %s -> %s: its socket is owned by none of the running nodes (pids %v) but by pid %d (%q)",
		ra, la, pids, owner, procCmdline(owner))
	return ""
}

// allPids lists every process's ID (diagnostics: who else dialed a proxy).
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procCmdline is pid's command line, "" when it is gone.
func procCmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

// Members implements Cluster.
func (c *ProcCluster) Members() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, n := range c.mu.nodes {
		if !n.removed {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Client implements Cluster.
func (c *ProcCluster) Client(id string) *client.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.nodes[id].cl
}

// HTTPAddr is the node's HTTP address.
func (c *ProcCluster) HTTPAddr(id string) string { return c.node(id).httpAddr }

// EtcdAddr is the node's etcd API address ("" without ProcConfig.Etcd).
func (c *ProcCluster) EtcdAddr(id string) string { return c.node(id).etcdAddr }

// Incarnation implements Cluster.
func (c *ProcCluster) Incarnation(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.nodes[id].incarnation
}

// Kill implements Cluster: SIGKILL (a paused process dies too) and wait for the exit.
func (c *ProcCluster) Kill(id string) error {
	return c.stop(id, syscall.SIGKILL)
}

// stop signals the node's process and waits for it to exit; ErrNotRunning when there
// is no process to stop.
func (c *ProcCluster) stop(id string, sig syscall.Signal) error {
	n := c.node(id)
	c.mu.Lock()
	if !n.running {
		c.mu.Unlock()
		return fmt.Errorf("stop %s: %w", id, ErrNotRunning)
	}
	n.stopping = true
	p, exited := n.cmd.Process, n.exited
	c.mu.Unlock()
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", id, err)
	}
	if sig != syscall.SIGKILL {
		p.Signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(15 * time.Second):
		p.Signal(syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%s did not stop on %s within 15s", id, sig)
	}
}

// Start implements Cluster: restart a stopped node on its data dir.
func (c *ProcCluster) Start(ctx context.Context, id string) error {
	n := c.node(id)
	c.mu.Lock()
	running := n.running
	c.mu.Unlock()
	if running {
		return nil
	}
	return c.launch(n, false, nil)
}

// Pause implements Cluster.
func (c *ProcCluster) Pause(id string) error { return c.signalRunning(id, syscall.SIGSTOP, true) }

// Resume implements Cluster.
func (c *ProcCluster) Resume(id string) error { return c.signalRunning(id, syscall.SIGCONT, false) }

func (c *ProcCluster) signalRunning(id string, sig syscall.Signal, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.nodes[id]
	if !n.running || n.paused == paused {
		return fmt.Errorf("signal %s %s: %w (running=%t paused=%t)", id, sig, ErrNotRunning, n.running, n.paused)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", id, err)
	}
	n.paused = paused
	return nil
}

// AddNode implements Cluster: a new process joins through every current member.
func (c *ProcCluster) AddNode(ctx context.Context) (string, error) {
	var join []string
	for _, id := range c.Members() {
		join = append(join, c.node(id).advAddr)
	}
	n, err := c.newNode(false)
	if err != nil {
		return "", err
	}
	if err := c.launch(n, false, join); err != nil {
		return "", err
	}
	return n.id, nil
}

// RemoveNode implements Cluster: remove through the leader's API, then stop it.
func (c *ProcCluster) RemoveNode(ctx context.Context, id string) error {
	if c.cfg.Remover == nil {
		return ErrUnsupported
	}
	leader, err := WaitLeader(ctx, c)
	if err != nil {
		return err
	}
	if err := c.cfg.Remover(ctx, c.HTTPAddr(leader), id, c.Token()); err != nil {
		return fmt.Errorf("remove %s via %s: %w", id, leader, err)
	}
	c.mu.Lock()
	c.mu.nodes[id].removed = true
	c.mu.Unlock()
	err = c.stop(id, syscall.SIGTERM)
	c.net.CloseNode(id)
	return err
}

// Supports implements Cluster.
func (c *ProcCluster) Supports(k FaultKind) bool {
	switch k {
	case FaultRemove, FaultReplace:
		return c.cfg.Remover != nil
	case FaultDiskFull:
		return c.DiskNode() != ""
	case FaultLogIO:
		return c.cfg.LogFaults
	}
	return true
}

// Crashed implements Cluster.
func (c *ProcCluster) Crashed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, n := range c.mu.nodes {
		if n.crashed {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// HealAll implements Cluster.
func (c *ProcCluster) HealAll(ctx context.Context) error {
	c.net.Heal()
	var errs []error
	for _, id := range c.Members() {
		n := c.node(id)
		if n.tmpfs {
			errs = append(errs, c.FreeDisk(id))
		}
		c.mu.Lock()
		running, paused := n.running, n.paused
		c.mu.Unlock()
		switch {
		case paused:
			errs = append(errs, c.Resume(id))
		case !running:
			errs = append(errs, c.Start(ctx, id))
		}
	}
	return errors.Join(errs...)
}

// CollectLogs implements Cluster.
func (c *ProcCluster) CollectLogs(dir string) error {
	c.mu.Lock()
	var paths []string
	for _, n := range c.mu.nodes {
		paths = append(paths, n.logPath)
	}
	c.mu.Unlock()
	var errs []error
	for _, p := range paths {
		errs = append(errs, copyFile(p, filepath.Join(dir, filepath.Base(p))))
	}
	return errors.Join(errs...)
}

// Close implements Cluster: kill every process, stop the proxies, unmount tmpfs.
func (c *ProcCluster) Close() {
	c.mu.Lock()
	var ids []string
	for id := range c.mu.nodes {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.Kill(id)
	}
	c.net.Close()
	for _, id := range ids {
		clusterTLS.Delete(c.node(id).httpAddr)
		if n := c.node(id); n.tmpfs {
			if err := unmount(n.dataDir); err != nil {
				c.cfg.Logf("unmount %s: %v", n.dataDir, err)
			}
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SetRelease makes the node run bin with extra arguments from its next start (a
// rolling upgrade or downgrade swaps binaries on the same data dir).
func (c *ProcCluster) SetRelease(id, bin string, extra []string) {
	n := c.node(id)
	c.mu.Lock()
	n.bin, n.extra = bin, append([]string(nil), extra...)
	c.mu.Unlock()
}

// Restart stops the node gracefully (SIGTERM: it hands leadership over and leaves
// nothing half-written) and starts it again, with the release SetRelease chose.
func (c *ProcCluster) Restart(ctx context.Context, id string) error {
	if err := c.stop(id, syscall.SIGTERM); err != nil {
		return err
	}
	return c.Start(ctx, id)
}
