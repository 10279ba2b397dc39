//go:build readme

// The README's curl walkthrough, run against a real `make run` node (make readme-test).
//
// Every block fenced as ```sh readme-test is a shell session: "$ " starts a command,
// "> " continues it, and the lines up to the next command are what it prints. The test
// starts `keel agent -dev -schema docs/examples/widgets-v2.yaml` as `make run` does
// (on free ports: the README's localhost:7370 is rewritten), runs each command with
// bash, and compares what it prints, line by line, with what the README says. Volatile
// parts are written so:
//
//   - "..." matches anything (an elided list, a message, a node ID);
//   - <name> in an answer matches an opaque string (a continue token) and binds it;
//     the same <name> in a later command is replaced by it;
//   - a revision number in an answer ("revision", "create_revision", "mod_revision",
//     "compact_revision") names a revision: the first time it binds to the one the
//     node printed, later it must equal it, and in later commands ("revision=N",
//     "prev_revision=N", "revision":N in a body) it is replaced by it. So the README
//     shows the numbers of a fresh node walked through at once, and the test still
//     holds when the node's own writes (registration, the 10 s StorageState heartbeat)
//     have moved the revisions on. "revision N" and "not N" in a message are revision
//     numbers too.
package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// waitSettled waits, as a person reading the README would, until the node is ready and
// has written its own records: registered the schema's storage versions (readiness
// needs it) and recorded the (empty) migration of the example resource.
func waitSettled(t *testing.T, addr string) {
	t.Helper()
	c, err := client.New([]string{addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		migs, err := c.Migrations(ctx)
		cancel()
		if err == nil && len(migs) > 0 && migs[0].State == api.MigrationSucceeded {
			resp, err := http.Get("http://" + addr + api.PathReady)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dev node did not settle in 30s: %v %+v", err, migs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readmeCmd is one command of a readme-test block and what it prints.
type readmeCmd struct {
	line int // of the "$ " line in README.md
	cmd  string
	want []string
}

func parseReadme(t *testing.T, text string) []readmeCmd {
	var cmds []readmeCmd
	in := false
	for i, l := range strings.Split(text, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```sh readme-test":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			cmds = append(cmds, readmeCmd{line: i + 1, cmd: l[2:]})
		case in && strings.HasPrefix(l, "> "):
			if len(cmds) == 0 {
				t.Fatalf("README.md:%d: a continuation line before any command", i+1)
			}
			cmds[len(cmds)-1].cmd += "\n" + l[2:]
		case in:
			if len(cmds) == 0 {
				t.Fatalf("README.md:%d: output before any command", i+1)
			}
			cmds[len(cmds)-1].want = append(cmds[len(cmds)-1].want, l)
		}
	}
	for i := range cmds {
		w := cmds[i].want
		for len(w) > 0 && strings.TrimSpace(w[len(w)-1]) == "" {
			w = w[:len(w)-1]
		}
		cmds[i].want = w
	}
	return cmds
}

// bindings maps the README's names (revision numbers, <placeholders>) to what the
// node really printed.
type bindings struct {
	revs  map[string]string
	names map[string]string
}

var (
	revField    = regexp.MustCompile(`"(revision|create_revision|mod_revision|compact_revision)":(\d+)`)
	revText     = regexp.MustCompile(`\b(revision|not) (\d+)\b`) // in messages: "has mod revision 6, not 5"
	placeholder = regexp.MustCompile(`<([a-z][a-z0-9-]*)>`)
	revParam    = regexp.MustCompile(`\b(revision|prev_revision)=(\d+)`)
	revBody     = regexp.MustCompile(`"revision":(\d+)`)
)

// substitute rewrites a command with what is bound so far.
func (b *bindings) substitute(cmd string) (string, error) {
	var err error
	cmd = placeholder.ReplaceAllStringFunc(cmd, func(m string) string {
		v, ok := b.names[m[1:len(m)-1]]
		if !ok {
			err = fmt.Errorf("%s is used before an answer shows it", m)
		}
		return v
	})
	rev := func(re *regexp.Regexp, group int) {
		cmd = re.ReplaceAllStringFunc(cmd, func(m string) string {
			sub := re.FindStringSubmatch(m)
			if v, ok := b.revs[sub[group]]; ok {
				return strings.Replace(m, sub[group], v, 1)
			}
			return m
		})
	}
	rev(revParam, 2)
	rev(revBody, 1)
	return cmd, err
}

// match compares one printed line with the README's line, binding names.
func (b *bindings) match(want, got string) error {
	type capture struct{ kind, name string }
	var re strings.Builder
	var caps []capture
	re.WriteString("^")
	for rest := want; rest != ""; {
		switch {
		case strings.HasPrefix(rest, "..."):
			re.WriteString(".*")
			rest = rest[3:]
		case placeholder.MatchString(rest) && placeholder.FindStringIndex(rest)[0] == 0:
			m := placeholder.FindStringSubmatch(rest)
			re.WriteString(`([^"\s&]+)`)
			caps = append(caps, capture{"name", m[1]})
			rest = rest[len(m[0]):]
		case revField.MatchString(rest) && revField.FindStringIndex(rest)[0] == 0:
			m := revField.FindStringSubmatch(rest)
			re.WriteString(regexp.QuoteMeta(`"`+m[1]+`":`) + `(\d+)`)
			caps = append(caps, capture{"rev", m[2]})
			rest = rest[len(m[0]):]
		case revText.MatchString(rest) && revText.FindStringIndex(rest)[0] == 0:
			m := revText.FindStringSubmatch(rest)
			re.WriteString(regexp.QuoteMeta(m[1]+" ") + `(\d+)`)
			caps = append(caps, capture{"rev", m[2]})
			rest = rest[len(m[0]):]
		default:
			_, size := utf8.DecodeRuneInString(rest)
			re.WriteString(regexp.QuoteMeta(rest[:size]))
			rest = rest[size:]
		}
	}
	re.WriteString("$")
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return fmt.Errorf("got  %s\nwant %s", got, want)
	}
	for i, c := range caps {
		v := m[i+1]
		table := b.names
		if c.kind == "rev" {
			table = b.revs
		}
		if old, ok := table[c.name]; ok && old != v {
			return fmt.Errorf("got  %s\nwant %s\n(%s was %s before, now %s)", got, want, c.name, old, v)
		}
		table[c.name] = v
	}
	return nil
}

func TestREADMEWalkthrough(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := parseReadme(t, string(text))
	if len(cmds) < 10 {
		t.Fatalf("README.md has %d readme-test commands, want the whole curl walkthrough", len(cmds))
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to run the README's commands")
	}
	bin := os.Getenv("KEEL_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "keel")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	httpPort, err1 := freeport.TCP("127.0.0.1")
	raftPort, err2 := freeport.TCP("127.0.0.1")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	addr := fmt.Sprintf("localhost:%d", httpPort)

	// make run, on free ports.
	agent := exec.Command(bin, "agent", "-dev", "-schema", "docs/examples/widgets-v2.yaml",
		"-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort), "-raft-addr", fmt.Sprintf("127.0.0.1:%d", raftPort))
	agent.Dir = root
	stdout, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	agent.Stderr = &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var dataDir string
	t.Cleanup(func() {
		agent.Process.Signal(syscall.SIGINT) // Ctrl-C, as after make run
		done := make(chan error, 1)
		go func() { done <- agent.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agent exit after Ctrl-C: %v", err)
			}
		case <-time.After(20 * time.Second):
			agent.Process.Kill()
			t.Error("agent did not stop after Ctrl-C")
		}
		if dataDir != "" && strings.HasPrefix(filepath.Base(dataDir), "keel-dev-") {
			os.RemoveAll(dataDir)
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	select {
	case l := <-lines:
		// keel node ID serving http://ADDR (raft ADDR, data dir DIR)
		if i := strings.LastIndex(l, "data dir "); i >= 0 {
			dataDir = strings.TrimSuffix(l[i+len("data dir "):], ")")
		}
		t.Log(l)
	case <-time.After(30 * time.Second):
		t.Fatal("agent printed no address in 30s")
	}
	go func() {
		for range lines {
		}
	}()

	waitSettled(t, addr)

	b := &bindings{revs: map[string]string{}, names: map[string]string{}}
	for _, c := range cmds {
		cmd, err := b.substitute(c.cmd)
		if err != nil {
			t.Fatalf("README.md:%d: %v", c.line, err)
		}
		cmd = strings.ReplaceAll(cmd, "localhost:7370", addr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sh := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; "+cmd)
		sh.Dir = root
		out, err := sh.Output()
		cancel()
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v", c.line, c.cmd, err)
		}
		got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(out) == 0 {
			got = nil
		}
		if os.Getenv("KEEL_README_PRINT") != "" {
			t.Logf("README.md:%d: $ %s\n%s", c.line, c.cmd, out)
		}
		if len(got) != len(c.want) {
			t.Errorf("README.md:%d: $ %s\nprinted %d lines, the README shows %d:\n%s", c.line, c.cmd, len(got), len(c.want), out)
			continue
		}
		for i := range got {
			if err := b.match(c.want[i], got[i]); err != nil {
				t.Errorf("README.md:%d: $ %s\n%v", c.line, c.cmd, err)
			}
		}
	}
}
