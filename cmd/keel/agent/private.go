package agent

import (
	"io/fs"
	"os"
	"path/filepath"
)

// A node's data dir holds every key, the cluster secret and the Raft state: only its
// user may read it. Directories are 0700 and files 0600. keel's own files are created
// so; hashicorp/raft's snapshot store creates 0755 directories and 0644 files, so the
// agent also sets the process umask to 077 (umask_unix.go) and, at start, narrows
// whatever an earlier release or the operator left wider.

// privatizeDataDir narrows the modes under dir to 0700/0600 and returns how many it
// changed.
func privatizeDataDir(dir string) (int, error) {
	changed := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm()&^want != 0 {
			if err := os.Chmod(path, info.Mode().Perm()&want); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	return changed, err
}
