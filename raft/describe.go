package raft

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DescribeState lists the Raft state of dataDir for an operator deciding what a damaged
// log cost: each WAL segment with the first index it holds and its size, and each
// snapshot with the index whose state it holds. It only reads directory listings, so
// it works on state that Open refuses.
func DescribeState(dataDir string) string {
	dir := filepath.Join(dataDir, "raft")
	var b strings.Builder
	fmt.Fprintf(&b, "raft state in %s:\n", dir)
	segs, _ := os.ReadDir(filepath.Join(dir, walDir))
	var firsts []uint64
	for _, e := range segs {
		name := e.Name()
		if !strings.HasPrefix(name, "seg-") || !strings.HasSuffix(name, ".wal") {
			continue
		}
		first, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "seg-"), ".wal"), 10, 64)
		if err != nil {
			continue
		}
		firsts = append(firsts, first)
		size := int64(-1)
		if info, err := e.Info(); err == nil {
			size = info.Size()
		}
		fmt.Fprintf(&b, "  %s/%s: entries from index %d on, %d bytes\n", walDir, name, first, size)
	}
	if len(firsts) == 0 {
		fmt.Fprintf(&b, "  no WAL segment\n")
	}
	snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	var idx []uint64
	for _, e := range snaps {
		var term, index, ms uint64
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &ms); err == nil && e.IsDir() {
			idx = append(idx, index)
			fmt.Fprintf(&b, "  snapshots/%s: the state at index %d (term %d)\n", e.Name(), index, term)
		}
	}
	if len(idx) > 0 {
		fmt.Fprintf(&b, "  entries up to index %d are in the latest snapshot; the damaged segment's entries from the damaged offset on are not readable here\n",
			slices.Max(idx))
	} else {
		fmt.Fprintf(&b, "  no snapshot: the damaged segment's entries from the damaged offset on are not readable here\n")
	}
	return b.String()
}
