package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/client"
)

// Docker names every resource it creates keel-chaos-<run>-... and labels it with the
// PID of the test process that owns it (keel-chaos-owner=PID), and removes it on
// Close. SweepDocker removes only resources whose owner is gone, so runs of several
// engineers on one machine leave each other alone.
const ownerLabelKey = "keel-chaos-owner"

var dockerLabel = fmt.Sprintf("%s=%d", ownerLabelKey, os.Getpid())

const (
	dockerHTTPPort = 7370
	dockerRaftPort = 7371
)

// docker runs the docker CLI and returns its trimmed standard output.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// DockerAvailable says why containers cannot run here (nil when a daemon answers).
func DockerAvailable(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("no docker CLI: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		return fmt.Errorf("no docker daemon: %w", err)
	}
	return nil
}

// IsStatic says whether the binary at path is statically linked (no ELF interpreter),
// so that it runs in a FROM scratch image.
func IsStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// DockerImage builds a FROM scratch image holding the static binary bin (nothing is
// pulled) and returns its tag; RemoveImage deletes it.
func DockerImage(ctx context.Context, bin string) (string, error) {
	if err := IsStatic(bin); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "keel-chaos-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if err := copyFile(bin, filepath.Join(dir, "keel")); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(dir, "keel"), 0o755); err != nil {
		return "", err
	}
	df := "FROM scratch\nCOPY keel /keel\nLABEL keel-chaos=1\nENTRYPOINT [\"/keel\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		return "", err
	}
	tag := "keel-chaos:" + randomHex(4)
	if _, err := docker(ctx, "build", "-q", "-t", tag, dir); err != nil {
		return "", err
	}
	return tag, nil
}

// RemoveImage deletes an image DockerImage built.
func RemoveImage(tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	docker(ctx, "rmi", "-f", tag)
}

// dockerNode is one keel container (re-created on restart with the same IP and data).
// adv is the Raft address it advertises: its own, or its proxy's on the host.
type dockerNode struct {
	id, name, ip, dataDir, logPath, adv string
	cl                                  *client.Client
	incarnation                         int
	running, paused, removed            bool
	crashed                             bool
}

// DockerCluster runs keel as containers on a private bridge network the test creates.
// Network faults run inside each container's network namespace (nsenter + iptables
// for links, tc netem for delay and loss): the rules vanish with the container. Where
// the kernel has no netem, every node advertises a fault-injecting proxy on the host
// (the bridge's gateway address, see Network) instead of its own Raft address, and
// delay and loss are the proxy's, per link, as on the process backend.
type DockerCluster struct {
	image, network, prefix, subnet, dir string
	linkFaults                          bool     // nsenter and iptables are usable
	netem                               bool     // tc netem works (the kernel has sch_netem)
	proxy                               *Network // nil when netem delays and drops
	logf                                func(string, ...any)
	agentArgs                           []string // added to every agent command line
	acl                                 bool     // bootstrap ACLs through the first node

	mu struct {
		sync.Mutex
		nodes map[string]*dockerNode
		next  int
		token string // the ACL management token ("" without ACLs)
	}
}

var _ Cluster = (*DockerCluster)(nil)

// StartDockerCluster creates a network and n containers from image. With acl the
// harness bootstraps ACLs through the first node and its clients send the token.
// agentArgs are added to every node's agent command line.
func StartDockerCluster(ctx context.Context, image, dir string, n int, logf func(string, ...any), acl bool,
	agentArgs ...string) (*DockerCluster, error) {
	c := &DockerCluster{image: image, dir: dir, prefix: "keel-chaos-" + randomHex(3), logf: logf, agentArgs: agentArgs,
		acl: acl}
	c.mu.nodes = map[string]*dockerNode{}
	c.network = c.prefix
	if err := c.createNetwork(ctx); err != nil {
		return nil, err
	}
	c.linkFaults, c.netem = linkToolsAvailable(), NetemAvailable() == nil
	if !c.netem {
		c.proxy = NewNetwork(c.identify)
	}
	var ids []string
	for i := 0; i < n; i++ {
		var join []string
		if i > 0 {
			join = []string{c.node(ids[0]).raftAddr()}
		}
		id, err := c.newNode(ctx, i == 0, join)
		if err != nil {
			c.Close()
			return nil, err
		}
		ids = append(ids, id)
		if i == 0 {
			// Bootstrap first, as StartProcCluster does: under ACLs a tokenless
			// caller sees only the public status, which names no leader.
			if err := c.bootstrapACL(ctx, c.node(id)); err != nil {
				c.Close()
				return nil, err
			}
			if _, err := WaitLeader(ctx, c); err != nil {
				c.Close()
				return nil, fmt.Errorf("first container: %w", err)
			}
		}
	}
	if err := WaitVoters(ctx, c, ids); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func linkToolsAvailable() bool {
	for _, t := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(t); err != nil {
			return false
		}
	}
	return true
}

// NetemAvailable says why tc netem cannot delay or drop packets here (nil when it
// can), probing in a throwaway network namespace.
func NetemAvailable() error {
	for _, t := range []string{"unshare", "tc"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("no %s: %w", t, err)
		}
	}
	args := append([]string{"--net"}, netemArgs("lo", LinkFault{Delay: time.Millisecond})...)
	if out, err := exec.Command("unshare", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("tc netem: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// createNetwork creates a bridge network on a free private /24.
func (c *DockerCluster) createNetwork(ctx context.Context) error {
	var err error
	for try := 0; try < 16; try++ {
		b := make([]byte, 1)
		rand.Read(b)
		c.subnet = fmt.Sprintf("10.%d.%d", 200+int(b[0])%50, 1+try*13%250)
		_, err = docker(ctx, "network", "create", "--driver", "bridge", "--label", dockerLabel,
			"--subnet", c.subnet+".0/24", "--gateway", c.gateway(), c.network)
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("create docker network: %w", err)
}

// raftAddr is the address the node advertises and peers dial.
func (n *dockerNode) raftAddr() string {
	if n.adv != "" {
		return n.adv
	}
	return fmt.Sprintf("%s:%d", n.ip, dockerRaftPort)
}

// gateway is the host's address on the cluster's bridge (where proxies listen).
func (c *DockerCluster) gateway() string { return c.subnet + ".1" }

// identify names the container that dialed a proxied connection by its source IP
// (traffic from a container to its bridge's gateway is not translated).
func (c *DockerCluster) identify(remote, _ net.Addr) string {
	ra, ok := remote.(*net.TCPAddr)
	if !ok {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.mu.nodes {
		if n.ip == ra.IP.String() {
			return id
		}
	}
	return ""
}

// Unidentified counts proxied connections whose dialing container could not be found
// (link faults could not apply to them); 0 without proxies.
func (c *DockerCluster) Unidentified() []string {
	if c.proxy == nil {
		return nil
	}
	return c.proxy.Unidentified()
}

func (c *DockerCluster) node(id string) *dockerNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.nodes[id]
}

func (c *DockerCluster) newNode(ctx context.Context, bootstrap bool, join []string) (string, error) {
	c.mu.Lock()
	c.mu.next++
	k := c.mu.next
	c.mu.Unlock()
	id := fmt.Sprintf("n%d", k)
	n := &dockerNode{id: id, name: c.prefix + "-" + id, ip: fmt.Sprintf("%s.%d", c.subnet, 10+k),
		dataDir: filepath.Join(c.dir, id), logPath: filepath.Join(c.dir, id+".log")}
	n.cl = newNodeClient(fmt.Sprintf("%s:%d", n.ip, dockerHTTPPort), c.Token())
	if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
		return "", err
	}
	if c.proxy != nil {
		port, err := freeport.TCP(c.gateway())
		if err != nil {
			return "", fmt.Errorf("proxy port for %s: %w", id, err)
		}
		listen := net.JoinHostPort(c.gateway(), strconv.Itoa(port))
		if n.adv, err = c.proxy.Listen(id, listen, fmt.Sprintf("%s:%d", n.ip, dockerRaftPort)); err != nil {
			return "", err
		}
	}
	c.mu.Lock()
	c.mu.nodes[id] = n
	c.mu.Unlock()
	return id, c.run(ctx, n, bootstrap, join)
}

// run creates and starts the node's container (bootstrap/join only on first start).
func (c *DockerCluster) run(ctx context.Context, n *dockerNode, bootstrap bool, join []string) error {
	args := []string{"run", "-d", "--name", n.name, "--label", dockerLabel, "--network", c.network,
		"--ip", n.ip, "-v", n.dataDir + ":/data", c.image,
		"agent", "-node-id", n.id, "-data-dir", "/data",
		"-http-addr", fmt.Sprintf("0.0.0.0:%d", dockerHTTPPort),
		"-raft-addr", fmt.Sprintf("0.0.0.0:%d", dockerRaftPort), "-advertise", n.raftAddr(),
		"-insecure"} // the image is always this release's
	if bootstrap {
		args = append(args, "-bootstrap")
	}
	if len(join) > 0 {
		args = append(args, "-join", strings.Join(join, ","))
	}
	args = append(args, c.agentArgs...)
	if _, err := docker(ctx, args...); err != nil {
		return err
	}
	c.mu.Lock()
	n.running, n.paused = true, false
	c.mu.Unlock()
	return nil
}

// Name implements Cluster.
func (c *DockerCluster) Name() string { return "docker" }

// bootstrapACL bootstraps the ACL system through n when the cluster runs with ACLs,
// keeps the management token, and gives n a client that sends it.
func (c *DockerCluster) bootstrapACL(ctx context.Context, n *dockerNode) error {
	if !c.acl {
		return nil
	}
	addr := fmt.Sprintf("%s:%d", n.ip, dockerHTTPPort)
	tok, err := aclBootstrap(ctx, addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.mu.token, n.cl = tok.SecretID, newNodeClient(addr, tok.SecretID)
	c.mu.Unlock()
	c.logf("acl: bootstrapped (token accessor %s); every harness client sends it", tok.AccessorID)
	return nil
}

// Token is the ACL management token the harness uses ("" without ACLs).
func (c *DockerCluster) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.token
}

// Members implements Cluster.
func (c *DockerCluster) Members() []string {
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
func (c *DockerCluster) Client(id string) *client.Client { return c.node(id).cl }

// HTTPAddr is the node's HTTP address on the test's bridge network.
func (c *DockerCluster) HTTPAddr(id string) string {
	return fmt.Sprintf("%s:%d", c.node(id).ip, dockerHTTPPort)
}

// Incarnation implements Cluster.
func (c *DockerCluster) Incarnation(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.nodes[id].incarnation
}

func cmdCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// Kill implements Cluster (docker kill sends SIGKILL).
func (c *DockerCluster) Kill(id string) error {
	ctx, cancel := cmdCtx()
	defer cancel()
	n := c.node(id)
	if _, err := docker(ctx, "kill", n.name); err != nil {
		return err
	}
	c.mu.Lock()
	n.running, n.paused = false, false
	c.mu.Unlock()
	return nil
}

// Start implements Cluster: save the old container's log, re-create it on the same
// data dir and IP, without bootstrap or join.
func (c *DockerCluster) Start(ctx context.Context, id string) error {
	n := c.node(id)
	c.mu.Lock()
	running := n.running
	c.mu.Unlock()
	if running {
		return nil
	}
	c.saveLog(n)
	dctx, cancel := cmdCtx()
	defer cancel()
	if _, err := docker(dctx, "rm", "-f", n.name); err != nil {
		return err
	}
	c.mu.Lock()
	n.incarnation++
	c.mu.Unlock()
	return c.run(dctx, n, false, nil)
}

// saveLog appends the container's output to the node's log file.
func (c *DockerCluster) saveLog(n *dockerNode) {
	ctx, cancel := cmdCtx()
	defer cancel()
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== chaos: %s container %s incarnation %d\n", n.id, n.name, n.incarnation)
	cmd := exec.CommandContext(ctx, "docker", "logs", n.name)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Run()
}

// Pause implements Cluster (docker pause: the cgroup freezer, like SIGSTOP).
func (c *DockerCluster) Pause(id string) error { return c.setPaused(id, true) }

// Resume implements Cluster.
func (c *DockerCluster) Resume(id string) error { return c.setPaused(id, false) }

func (c *DockerCluster) setPaused(id string, paused bool) error {
	ctx, cancel := cmdCtx()
	defer cancel()
	n := c.node(id)
	verb := "unpause"
	if paused {
		verb = "pause"
	}
	if _, err := docker(ctx, verb, n.name); err != nil {
		return err
	}
	c.mu.Lock()
	n.paused = paused
	c.mu.Unlock()
	return nil
}

// Net implements Cluster.
func (c *DockerCluster) Net() NetFaults {
	if !c.linkFaults {
		return nil
	}
	return dockerNet{c}
}

// AddNode implements Cluster.
func (c *DockerCluster) AddNode(ctx context.Context) (string, error) {
	var join []string
	for _, id := range c.Members() {
		join = append(join, c.node(id).raftAddr())
	}
	return c.newNode(ctx, false, join)
}

// RemoveNode implements Cluster: no API removes a voter yet.
func (c *DockerCluster) RemoveNode(ctx context.Context, id string) error { return ErrUnsupported }

// DiskNode implements Cluster: containers have no tmpfs data dir.
func (c *DockerCluster) DiskNode() string { return "" }

// FillDisk implements Cluster.
func (c *DockerCluster) FillDisk(id string) error { return ErrUnsupported }

// FreeDisk implements Cluster.
func (c *DockerCluster) FreeDisk(id string) error { return nil }

// FailLog implements Cluster: not on containers (the fault file lives on the host).
func (c *DockerCluster) FailLog(context.Context, string, string) (func() error, error) {
	return nil, ErrUnsupported
}

// CorruptLog implements Cluster: not on containers.
func (c *DockerCluster) CorruptLog(context.Context, string) (func() error, error) {
	return nil, ErrUnsupported
}

// LoseState implements Cluster: not on containers.
func (c *DockerCluster) LoseState(context.Context, string, string) (func() error, error) {
	return nil, ErrUnsupported
}

// Supports implements Cluster.
func (c *DockerCluster) Supports(k FaultKind) bool {
	switch k {
	case FaultKill, FaultPause, FaultAdd:
		return true
	case FaultIsolate, FaultSplit, FaultOneWay, FaultBridge:
		return c.linkFaults
	case FaultDelay, FaultDrop:
		return c.linkFaults && (c.netem || c.proxy != nil)
	}
	return false
}

// Crashed implements Cluster: containers the harness believes running that are not.
func (c *DockerCluster) Crashed() []string {
	ctx, cancel := cmdCtx()
	defer cancel()
	var out []string
	for _, id := range c.Members() {
		n := c.node(id)
		c.mu.Lock()
		running, crashed := n.running, n.crashed
		c.mu.Unlock()
		if !running {
			if crashed {
				out = append(out, id)
			}
			continue
		}
		st, err := docker(ctx, "inspect", "-f", "{{.State.Running}}", n.name)
		if err == nil && st == "false" {
			c.mu.Lock()
			n.running, n.crashed = false, true
			c.mu.Unlock()
			out = append(out, id)
		}
	}
	return out
}

// HealAll implements Cluster.
func (c *DockerCluster) HealAll(ctx context.Context) error {
	var errs []error
	if n := c.Net(); n != nil {
		errs = append(errs, n.Heal())
	}
	for _, id := range c.Members() {
		n := c.node(id)
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
func (c *DockerCluster) CollectLogs(dir string) error {
	var errs []error
	for _, id := range c.Members() {
		n := c.node(id)
		c.saveLog(n)
		errs = append(errs, copyFile(n.logPath, filepath.Join(dir, id+".log")))
	}
	return errors.Join(errs...)
}

// Close implements Cluster: remove every container and the network.
func (c *DockerCluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.mu.Lock()
	var names []string
	for _, n := range c.mu.nodes {
		names = append(names, n.name)
	}
	c.mu.Unlock()
	if len(names) > 0 {
		docker(ctx, append([]string{"rm", "-f"}, names...)...)
	}
	if c.proxy != nil {
		c.proxy.Close()
	}
	docker(ctx, "network", "rm", c.network)
}

// dockerNet breaks links inside each container's network namespace.
type dockerNet struct{ c *DockerCluster }

// nsexec runs a host tool inside the node container's network namespace.
func (d dockerNet) nsexec(id string, args ...string) error {
	ctx, cancel := cmdCtx()
	defer cancel()
	n := d.c.node(id)
	pid, err := docker(ctx, "inspect", "-f", "{{.State.Pid}}", n.name)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(pid); err != nil || p == 0 {
		return fmt.Errorf("container %s is not running", n.name)
	}
	full := append([]string{"-t", pid, "-n"}, args...)
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nsenter %s: %w: %s", strings.Join(full, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SetLink implements NetFaults. A blackhole drops from's packets to the Raft address
// to advertises (the connections from dials), so answers on to's own connections
// still flow, the same semantics as the proxy. Delay and drop become netem on from's
// interface (applied to all its traffic: netem has no per-destination rule here), or,
// without netem, the fault of the link in the host proxy.
func (d dockerNet) SetLink(from, to string, f LinkFault) error {
	if f.Blackhole {
		host, port, err := net.SplitHostPort(d.c.node(to).raftAddr())
		if err != nil {
			return err
		}
		return d.nsexec(from, "iptables", "-A", "OUTPUT", "-d", host, "-p", "tcp",
			"--dport", port, "-j", "DROP")
	}
	if f.Delay == 0 && f.DropRate == 0 {
		return nil
	}
	if d.c.proxy != nil {
		return d.c.proxy.SetLink(from, to, f)
	}
	return d.nsexec(from, netemArgs("eth0", f)...)
}

// netemArgs is the tc command that gives dev f's delay and loss.
func netemArgs(dev string, f LinkFault) []string {
	args := []string{"tc", "qdisc", "replace", "dev", dev, "root", "netem"}
	if f.Delay > 0 {
		args = append(args, "delay", f.Delay.String(), f.Jitter.String())
	}
	if f.DropRate > 0 {
		args = append(args, "loss", fmt.Sprintf("%.2f%%", f.DropRate*100))
	}
	return args
}

// SetAll implements NetFaults.
func (d dockerNet) SetAll(nodes []string, f LinkFault) error {
	var errs []error
	if !f.Blackhole && d.c.proxy != nil {
		return d.c.proxy.SetAll(nodes, f)
	}
	if !f.Blackhole {
		for _, n := range nodes {
			errs = append(errs, d.SetLink(n, "", f))
		}
		return errors.Join(errs...)
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				errs = append(errs, d.SetLink(a, b, f))
			}
		}
	}
	return errors.Join(errs...)
}

// Partition implements NetFaults.
func (d dockerNet) Partition(sides ...[]string) error {
	var errs []error
	for i, sa := range sides {
		for j, sb := range sides {
			if i == j {
				continue
			}
			for _, a := range sa {
				for _, b := range sb {
					errs = append(errs, d.SetLink(a, b, LinkFault{Blackhole: true}))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Heal implements NetFaults: flush the rules and netem of every running container,
// and the faults of the proxies.
func (d dockerNet) Heal() error {
	var errs []error
	if d.c.proxy != nil {
		errs = append(errs, d.c.proxy.Heal())
	}
	for _, id := range d.c.Members() {
		n := d.c.node(id)
		d.c.mu.Lock()
		running := n.running
		d.c.mu.Unlock()
		if !running {
			continue
		}
		errs = append(errs, d.nsexec(id, "iptables", "-F", "OUTPUT"))
		if d.c.netem {
			d.nsexec(id, "tc", "qdisc", "del", "dev", "eth0", "root") // fails when none: fine
		}
	}
	return errors.Join(errs...)
}
