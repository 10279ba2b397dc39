package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// DetectRemover returns a Remover that runs `keel remove-peer ID --addr HTTP` when the
// binary has that subcommand, else nil (keel exposes no way to remove a voter, and the
// remove and replace faults are skipped).
func DetectRemover(bin string) func(ctx context.Context, httpAddr, id, token string) error {
	out, err := exec.Command(bin, "remove-peer", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "remove-peer") {
		return nil
	}
	return func(ctx context.Context, httpAddr, id, token string) error {
		cmd := exec.CommandContext(ctx, bin, "remove-peer", id, "--addr", httpAddr)
		if token != "" {
			cmd.Env = append(os.Environ(), "KEEL_TOKEN="+token) // not on the command line: ps shows that
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("keel remove-peer %s: %w: %s", id, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}
