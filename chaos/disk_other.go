//go:build !linux

package chaos

import "fmt"

func mountTmpfs(dir string, size int64) error {
	return fmt.Errorf("mount tmpfs: %w", ErrUnsupported)
}

func unmount(dir string) error { return nil }

// CanMount says whether this process may mount a tmpfs: never off Linux.
func CanMount() error { return ErrUnsupported }

func fillFile(path string) error { return fmt.Errorf("fill disk: %w", ErrUnsupported) }
