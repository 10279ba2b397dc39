package wal

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		words string
		want  injected
	}{
		{"", injected{}},
		{"write", injected{write: true}},
		{"sync\n", injected{sync: true}},
		{"write sync", injected{write: true, sync: true}},
		{"slow=2ms", injected{slow: 2 * time.Millisecond}},
		{"slow=1.5s write", injected{write: true, slow: 1500 * time.Millisecond}},
		{"slow=", injected{}},
		{"slow=2", injected{}},     // no unit: not a duration
		{"slow=-1ms", injected{}},  // not a delay
		{"slow=bogus", injected{}}, // ignored, as an unknown word is
		{"Sync slows", injected{}}, // words are exact
		{"slow=1ms slow=3ms", injected{slow: 3 * time.Millisecond}},
	} {
		if got := parseFaults(tc.words); got != tc.want {
			t.Errorf("parseFaults(%q) = %+v, want %+v", tc.words, got, tc.want)
		}
	}
}

// TestFaultFSSlowSync: slow=DUR makes a store's sync take at least DUR, and a slow
// sync that is also told to fail still fails.
func TestFaultFSSlowSync(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(dir, "control")
	s := openOS(t, filepath.Join(dir, "wal"), FaultFS{Control: control})
	const delay = 30 * time.Millisecond
	writeControl(t, control, "slow=30ms")
	start := time.Now()
	if err := s.StoreLogs(entries(1, 2)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("a store on a slow=30ms log took %v", took)
	}
	writeControl(t, control, "slow=30ms sync")
	if err := s.StoreLogs(entries(3, 3)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a store with sync failing too: %v, want EIO", err)
	}
}
