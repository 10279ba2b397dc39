package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

// TestKeyMigrateAdvanceWait: on a 3-node dev cluster with gossip, `keymigrate advance`
// returns once every member applies the new phase — by default, and without a
// terminal too (a script's next step was refused, 409: "node n2 applies phase 0, not
// the current phase 1 yet") — so the next advance, right after, is taken. Four steps
// back to back, 0 → 4, two of them with --wait said.
//
// Kills: an advance that returns as soon as the phase record is written.
func TestKeyMigrateAdvanceWait(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	base := devBasePort(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, devOptions{nodes: 3, httpAddr: fmt.Sprintf("127.0.0.1:%d", base),
			schema: "../../versions/testdata/widgets-keymig.yaml", logLevel: "error", logOutput: io.Discard,
			startUntil: time.Minute}, io.Discard)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(45 * time.Second):
			t.Error("dev did not stop")
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", base)
	c, err := client.New([]string{addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the first step would be taken (three members, all known).
	deadline := time.Now().Add(time.Minute)
	for {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.KeyMigration(qctx, "widgets-v2-keys")
		qcancel()
		if err == nil && st.NextBlocked == "" && len(st.Nodes) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster never allowed the first step: %+v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for to := 1; to <= 4; to++ {
		args := []string{"--addr", addr, "keymigrate", "advance", "widgets-v2-keys", "--wait-timeout", "30s"}
		if to > 2 {
			args = append(args, "--wait")
		}
		out, err := runKeel(t, t.TempDir(), args...)
		if err != nil {
			t.Fatalf("advance to %d: %v\n%s", to, err, out)
		}
		if want := fmt.Sprintf("every member applies phase %d", to); !strings.Contains(out, want) {
			t.Fatalf("advance to %d printed %q, want %q", to, out, want)
		}
	}
}

// TestKeyMigrateStepHelp: advance's --to is optional (the next phase), rollback's is
// required, and the usage lines say so.
func TestKeyMigrateStepHelp(t *testing.T) {
	for _, c := range []struct{ step, want string }{
		{"advance", "keymigrate advance NAME [--to N]"},
		{"rollback", "keymigrate rollback NAME --to N"},
	} {
		out, err := runCLI(t, "keymigrate", c.step, "--help")
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("keymigrate %s --help = %v, want the usage %q in:\n%s", c.step, err, c.want, out)
		}
	}
}
