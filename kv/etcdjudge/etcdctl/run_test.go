package etcdctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// step is one etcdctl command of a session, run the same way against both backends.
type step struct {
	args  []string // after --endpoints; {mod:K}, {create:K}, {next}, {lease:N} and {dir} are resolved per backend
	stdin string
	// until: the command runs until stopped (watch): it is interrupted once its
	// output holds this text (or after stepTimeout).
	until  string
	during []step // run once an `until` command has started
	lease  string // remember the lease `lease grant` printed under this name
	// run, when set, is a step of several etcdctl processes (lock, elect).
	run func(s *session) string
	// accept, when set, is an accepted difference: keel must answer exactly
	// accept.keel (normalised), whatever etcd answers.
	accept *accepted
}

// accepted is keel's answer to a step where it differs from etcd on purpose, and why
// (README.md, "Accepted differences").
type accepted struct {
	keel, why string
}

// stepTimeout bounds every etcdctl process.
const stepTimeout = 20 * time.Second

// session is a script's run against one backend.
type session struct {
	t      *testing.T
	b      *backend
	w      *writes
	n      *normaliser
	dir    string
	leases map[string]string // lease name → hex ID
	bin    string            // the etcdctl it runs: etcdctlBin (3.7) unless set
}

func newSession(t *testing.T, b *backend, prefix string) *session {
	w, err := watchWrites(context.Background(), b, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stop)
	dir := t.TempDir()
	return &session{t: t, b: b, w: w, n: newNormaliser(b, w, dir), dir: dir, leases: map[string]string{}, bin: etcdctlBin}
}

// do runs st and returns its normalised output.
func (s *session) do(st step) string {
	var out string
	if st.run != nil {
		out = st.run(s)
	} else {
		out = s.etcdctl(st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.w.sync(ctx); err != nil {
		s.t.Fatal(err)
	}
	return s.n.output(out)
}

// etcdctl runs one command to its end (or, with until, until interrupted).
func (s *session) etcdctl(st step) string {
	p := s.start(st.stdin, st.args...)
	var out string
	if st.until == "" {
		out = p.wait()
	} else {
		for _, d := range st.during {
			s.etcdctl(d)
		}
		p.waitOutput(func(o string) bool { return strings.Contains(o, st.until) })
		out = p.interrupt()
	}
	if st.lease != "" {
		s.rememberLease(st.lease, out)
	}
	return out
}

var reGranted = regexp.MustCompile(`lease ([0-9a-f]{16}) granted`)

func (s *session) rememberLease(name, out string) {
	if m := reGranted.FindStringSubmatch(out); m != nil {
		s.leases[name] = m[1]
	}
}

var rePlaceholder = regexp.MustCompile(`\{(\w+)(?::([^}]*))?\}`)

// resolve replaces the placeholders of args with this backend's values.
func (s *session) resolve(args []string) []string {
	re := rePlaceholder
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = re.ReplaceAllStringFunc(a, func(m string) string {
			sm := re.FindStringSubmatch(m)
			return s.placeholder(sm[1], sm[2])
		})
	}
	return out
}

func (s *session) placeholder(kind, arg string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch kind {
	case "dir":
		return s.dir
	case "lease":
		if id, ok := s.leases[arg]; ok {
			return id
		}
	case "next":
		rev, err := s.b.revision(ctx)
		if err == nil {
			return fmt.Sprint(rev + 1)
		}
	case "mod", "create":
		resp, err := s.b.c.Get(ctx, arg)
		if err == nil && len(resp.Kvs) == 1 && kind == "mod" {
			return fmt.Sprint(resp.Kvs[0].ModRevision)
		} else if err == nil && len(resp.Kvs) == 1 {
			return fmt.Sprint(resp.Kvs[0].CreateRevision)
		}
	}
	s.t.Fatalf("%s: placeholder {%s:%s} has no value", s.b.name, kind, arg)
	return ""
}

// keys counts the keys under prefix.
func (s *session) keys(prefix string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.b.c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.Count
}

// waitKeys waits until prefix holds n keys.
func (s *session) waitKeys(prefix string, n int64) {
	deadline := time.Now().Add(stepTimeout)
	for s.keys(prefix) != n {
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %s never held %d keys", s.b.name, prefix, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proc is one running etcdctl.
type proc struct {
	s      *session
	cmd    *exec.Cmd
	args   []string
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// start starts etcdctl with args (placeholders resolved) and stdin.
func (s *session) start(stdin string, args ...string) *proc {
	return s.startWith(strings.NewReader(stdin), args...)
}

// startWith starts etcdctl with args (placeholders resolved) reading stdin.
func (s *session) startWith(stdin io.Reader, args ...string) *proc {
	args = s.resolve(args)
	p := &proc{s: s, args: args, done: make(chan struct{})}
	p.cmd = exec.Command(s.bin, append([]string{"--endpoints=" + s.b.addr}, args...)...)
	p.cmd.Env = cleanEnv()
	if s.bin == etcdctl34 {
		p.cmd.Env = append(p.cmd.Env, "ETCDCTL_API=3") // 3.4 reads it; 3.7 warns of it
	}
	p.cmd.Stdin = stdin
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{&p.mu, &p.stdout}, lockedWriter{&p.mu, &p.stderr}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	return p
}

// cleanEnv is the environment without ETCDCTL_* settings of whoever runs the tests.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	return env
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// waitOutput waits until cond holds of the stdout so far, the process ends or
// stepTimeout passes.
func (p *proc) waitOutput(cond func(string) bool) {
	deadline := time.Now().Add(stepTimeout)
	for !cond(p.output()) && time.Now().Before(deadline) {
		select {
		case <-p.done:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lines waits for n lines of stdout.
func (p *proc) lines(n int) {
	p.waitOutput(func(o string) bool { return strings.Count(o, "\n") >= n })
}

// interrupt lets late output arrive, sends SIGINT (as Ctrl-C) and returns wait.
func (p *proc) interrupt() string {
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGINT)
	return p.wait()
}

// wait waits for the end (killing the process after stepTimeout) and returns the
// command, its stdout, stderr and exit code.
func (p *proc) wait() string {
	select {
	case <-p.done:
	case <-time.After(stepTimeout):
		p.cmd.Process.Kill()
		<-p.done
		p.s.t.Errorf("%s: etcdctl %q ran over %v", p.s.b.name, p.args, stepTimeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.stdout.String()
	if p.stderr.Len() > 0 {
		out += "stderr:\n" + p.stderr.String()
	}
	return out + fmt.Sprintf("exit %d", p.cmd.ProcessState.ExitCode())
}
