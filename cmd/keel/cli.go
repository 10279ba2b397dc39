package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"golang.org/x/term"

	"github.com/keel-kv/keel/kv/client"
)

// defaultPort is the port of an -addr given without one (`-addr localhost`).
const defaultPort = "7370"

// exitCodesHelp is the CLI's exit status contract, shown by `keel --help` and in the
// README.
const exitCodesHelp = `Exit status:
  0  success
  1  failure: a failed or refused request, bad usage, no node reachable
  2  not found (404): the key, lease or object does not exist (as grep's "no match")
  3  conflict (409): a compare-and-swap lost, or a step was refused; nothing changed
  keel lock NAME -- COMMAND exits with COMMAND's status.`

// newCLI is the command tree main runs: newRootCmd plus what every command shares —
// the -o and -addr checks, usage-saying argument errors, the exit codes in --help.
func newCLI() *cobra.Command {
	root := newRootCmd()
	root.Long = root.Short + "\n\n" + exitCodesHelp
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return prepareGlobal() }
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		explainArgs(c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// prepareGlobal checks -o and gives every -addr without a port the default one.
func prepareGlobal() error {
	switch global.output {
	case "text", "json", "yaml":
	default:
		return fmt.Errorf("-o %q: want text, json or yaml (text already prints tables where there are tables)", global.output)
	}
	var addrs []string
	for _, a := range strings.Split(global.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, withDefaultPort(a))
		}
	}
	global.addr = strings.Join(addrs, ",")
	return nil
}

// withDefaultPort adds :7370 to an address that names no port: "localhost",
// "https://n1.internal", "[::1]".
func withDefaultPort(a string) string {
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil || u.Host == "" || u.Port() != "" {
			return a
		}
		u.Host = net.JoinHostPort(strings.Trim(u.Host, "[]"), defaultPort)
		return u.String()
	}
	if _, _, err := net.SplitHostPort(a); err != nil && strings.Contains(err.Error(), "missing port") {
		return net.JoinHostPort(strings.Trim(a, "[]"), defaultPort)
	}
	return a
}

// argHints say what a command's positional arguments are for, when they are wrong.
var argHints = map[string]string{
	"keel get":              "give the key to read (or the prefix, with --prefix)",
	"keel put":              "give the key to write and its value (or the value on standard input)",
	"keel del":              "give the key to delete (or the prefix, with --prefix)",
	"keel compact":          "give the revision to compact up to (keel status shows the current one)",
	"keel watch":            "give the prefix to watch (or the key, with --key)",
	"keel lease grant":      "give the lease's time to live, such as 10s",
	"keel lease keepalive":  "give the lease ID (keel lease grant prints it)",
	"keel lease revoke":     "give the lease ID (keel lease grant prints it)",
	"keel remove-peer":      "give the ID of the server to remove (keel members lists them)",
	"keel snapshot save":    "give the file to write",
	"keel snapshot restore": "give the snapshot file to restore (from keel snapshot save)",
}

// explainArgs makes a wrong argument count say what the command expects:
// "keel get KEY: give the key to read ..." rather than cobra's "accepts 1 arg(s)".
func explainArgs(c *cobra.Command) {
	orig := c.Args
	if orig == nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		err := orig(cmd, args)
		if err == nil {
			return nil
		}
		use := cmd.CommandPath()
		if _, rest, ok := strings.Cut(cmd.Use, " "); ok {
			use += " " + rest
		}
		if hint, ok := argHints[cmd.CommandPath()]; ok {
			return fmt.Errorf("%s: %s (got %d argument(s))", use, hint, len(args))
		}
		return fmt.Errorf("%s: %w", use, err)
	}
}

// pkgPrefix matches the Go package prefixes that server errors carry ("fsm: ",
// "kv: ", "migrate: "): noise to a CLI user, stripped where the CLI prints an API
// error's message. The sentinel errors themselves keep them.
var pkgPrefix = regexp.MustCompile(`\b(fsm|kv|migrate|raft|versions|membership|agent): `)

// explain rewrites err for the terminal: API messages without package prefixes,
// and a refused connection saying where keel looked and how to point it elsewhere.
func explain(err error) error {
	var e *client.Error
	if errors.As(err, &e) {
		e.Message = pkgPrefix.ReplaceAllString(e.Message, "")
		return err
	}
	if isDialError(err) {
		return fmt.Errorf("%w\n  no keel node answered at %s: %s", err, global.addr, dialHint())
	}
	return err
}

// dialHint is what to do when no node answered. Starting a dev node (make run) is
// the answer only for a dev setup: plain text, no token; against a secured cluster it
// would mislead, so the hint says to check the node and the address.
func dialHint() string {
	secured := global.caFile != "" || global.token != "" || strings.Contains(global.addr, "https://")
	if secured {
		return "is the node running? give the address of a live one with -addr or KEEL_ADDR (keel members lists them)"
	}
	return fmt.Sprintf("start one (make run, or keel agent -dev), or give its address with -addr or KEEL_ADDR (default 127.0.0.1:%s)",
		defaultPort)
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isTerminal reports whether w is a terminal: only then do live views move the cursor
// or clear the screen (a pipe or a file gets plain frames).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// childExit is the exit status of a command run by `keel lock`: keel exits with it.
type childExit struct{ code int }

func (c *childExit) Error() string { return fmt.Sprintf("exit status %d", c.code) }

// structured reports whether -o asks for a machine-readable format (json or yaml).
func structured() bool { return global.output == "json" || global.output == "yaml" }

// printValue writes v in the -o format: indented JSON, or YAML.
func printValue(w io.Writer, v any) error {
	if global.output == "yaml" {
		return printYAML(w, v)
	}
	return printJSON(w, v)
}

// printValueLine writes one item of a stream: a JSON line (-o json), or one YAML list
// item (-o yaml), so that a whole stream is one YAML list.
func printValueLine(w io.Writer, v any) error {
	if global.output == "yaml" {
		return printYAML(w, []any{v})
	}
	return json.NewEncoder(w).Encode(v)
}

// printYAML writes v as YAML with the field names of its JSON form.
func printYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return err
	}
	out, err := yaml.Marshal(yamlNumbers(tree))
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// yamlNumbers turns the json.Numbers of a decoded tree into int64 or float64, which
// YAML prints as numbers (a json.Number would print as a string).
func yamlNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = yamlNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = yamlNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	}
	return v
}
