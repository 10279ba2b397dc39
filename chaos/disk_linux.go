package chaos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// mountTmpfs mounts a tmpfs of size bytes on dir (needs root / CAP_SYS_ADMIN).
func mountTmpfs(dir string, size int64) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount unmounts dir, lazily if it is still busy.
func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		if err2 := syscall.Unmount(dir, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount %s: %w", dir, errors.Join(err, err2))
		}
	}
	return nil
}

// CanMount says whether this process may mount a tmpfs (root on Linux), probing with
// a real mount in a temp dir.
func CanMount() error {
	dir, err := os.MkdirTemp("", "keel-chaos-mount-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := mountTmpfs(dir, 1<<20); err != nil {
		return err
	}
	return unmount(dir)
}

// fillFile appends to path until the filesystem is full (ENOSPC is success), then
// checks that it is: a fill that left space free did not inject the fault.
func fillFile(path string) error {
	if err := appendUntilFull(path); err != nil {
		return err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		return fmt.Errorf("fill %s: %w", path, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free > 64<<10 {
		return fmt.Errorf("fill %s: %d bytes still free after filling", path, free)
	}
	return nil
}

func appendUntilFull(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return nil
		}
		return fmt.Errorf("fill %s: %w", path, err)
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return fmt.Errorf("fill %s: %w", path, err)
			}
		}
	}
	return nil
}
