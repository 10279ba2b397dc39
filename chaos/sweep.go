package chaos

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SweepMounts unmounts tmpfs mounts a killed earlier run left under the temp dir
// (keel-chaos-* work dirs); a normal run unmounts its own on Close.
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
		if len(fs) >= 3 && fs[2] == "tmpfs" && strings.HasPrefix(fs[1], prefix) {
			if unmount(fs[1]) == nil {
				swept = append(swept, fs[1])
			}
		}
	}
	return swept
}

// SweepDocker removes containers and networks labeled keel-chaos=1 that a killed
// earlier run left behind (a normal run removes its own on Close).
func SweepDocker(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var swept []string
	if ids, err := docker(ctx, "ps", "-aq", "--filter", "label="+dockerLabel); err == nil && ids != "" {
		docker(ctx, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		swept = append(swept, strings.Fields(ids)...)
	}
	if ids, err := docker(ctx, "network", "ls", "-q", "--filter", "label="+dockerLabel); err == nil && ids != "" {
		docker(ctx, append([]string{"network", "rm"}, strings.Fields(ids)...)...)
		swept = append(swept, strings.Fields(ids)...)
	}
	return swept
}
