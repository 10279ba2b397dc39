package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownerFile, in a run's work dir, holds the PID of the test process that owns it.
const ownerFile = "owner.pid"

// ownerAlive says whether the PID recorded in a work dir's owner file (or a docker
// owner label) belongs to a live process. Without a PID the owner is unknown: it
// may be a live run of an older harness, so it counts as alive.
func ownerAlive(pid string) bool {
	p, err := strconv.Atoi(strings.TrimSpace(pid))
	if err != nil || p <= 0 {
		return true
	}
	err = syscall.Kill(p, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// SweepMounts unmounts tmpfs mounts a killed earlier run left under the temp dir
// (keel-chaos-* work dirs whose owner process is gone); a normal run unmounts its own
// on Close, and a live run's mounts are never touched.
func SweepMounts() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	prefix := filepath.Join(os.TempDir(), "keel-chaos-")
	var swept []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 || fs[2] != "tmpfs" || !strings.HasPrefix(fs[1], prefix) {
			continue
		}
		pid, err := os.ReadFile(filepath.Join(filepath.Dir(fs[1]), ownerFile))
		if err != nil || ownerAlive(string(pid)) {
			continue
		}
		if unmount(fs[1]) == nil {
			swept = append(swept, fs[1])
		}
	}
	return swept
}

// SweepDocker removes containers and networks whose owner label names a process that
// is gone (a killed earlier run; a normal run removes its own on Close).
func SweepDocker(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	format := fmt.Sprintf(`{{.ID}} {{.Label "%s"}}`, ownerLabelKey)
	orphans := func(args ...string) []string {
		out, err := docker(ctx, append(args, "--filter", "label="+ownerLabelKey, "--format", format)...)
		if err != nil {
			return nil
		}
		var ids []string
		for _, line := range strings.Split(out, "\n") {
			id, pid, _ := strings.Cut(strings.TrimSpace(line), " ")
			if id != "" && !ownerAlive(pid) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var swept []string
	if ids := orphans("ps", "-a"); len(ids) > 0 {
		docker(ctx, append([]string{"rm", "-f"}, ids...)...)
		swept = append(swept, ids...)
	}
	if ids := orphans("network", "ls"); len(ids) > 0 {
		docker(ctx, append([]string{"network", "rm"}, ids...)...)
		swept = append(swept, ids...)
	}
	return swept
}
