package chaos

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// DetectRemover returns a Remover that runs `keel remove-peer ID --addr HTTP` when the
// binary has that subcommand, else nil (keel exposes no way to remove a voter, and the
// remove and replace faults are skipped).
func DetectRemover(bin string) func(ctx context.Context, httpAddr, id string) error {
	out, err := exec.Command(bin, "remove-peer", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "remove-peer") {
		return nil
	}
	return func(ctx context.Context, httpAddr, id string) error {
		out, err := exec.CommandContext(ctx, bin, "remove-peer", id, "--addr", httpAddr).CombinedOutput()
		if err != nil {
			return fmt.Errorf("keel remove-peer %s: %w: %s", id, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}
