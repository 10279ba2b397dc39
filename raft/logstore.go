package raft

import (
	"fmt"
	"os"
	"path/filepath"

	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/keel-kv/keel/raft/wal"
)

// walDir is where the Raft log lives inside the data directory; raft.db keeps the
// stable store (term, vote), and the log of releases before the WAL.
const walDir = "wal"

// openLogStore opens the segment-file log of dir. A data directory written by an
// earlier release keeps its log in raft.db: it is copied into a new WAL once, built
// under a temporary name and renamed into place only when complete, so a crash during
// the copy leaves the old log in charge and the copy starts over.
func openLogStore(dir string, bolt *raftboltdb.BoltStore, opts wal.Options) (*wal.Store, error) {
	log := opts.Logger
	path := filepath.Join(dir, walDir)
	if _, err := os.Stat(path); err == nil {
		return wal.OpenWith(path, opts)
	}
	first, err := bolt.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("raft: read old log: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raft: read old log: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	w, err := wal.Open(tmp)
	if err != nil {
		return nil, err
	}
	if last > 0 {
		log.Info("moving the raft log from raft.db to the WAL", "first", first, "last", last)
		if err := copyLog(bolt, w, first, last); err != nil {
			w.Close()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("raft: install wal: %w", err)
	}
	if err := (wal.OSFS{}).SyncDir(dir); err != nil {
		return nil, fmt.Errorf("raft: install wal: %w", err)
	}
	if last > 0 {
		// The WAL is in place and authoritative; the old copy only takes space.
		if err := bolt.DeleteRange(first, last); err != nil {
			log.Warn("could not drop the old log from raft.db", "error", err)
		}
	}
	return wal.OpenWith(path, opts)
}

func copyLog(from hraft.LogStore, to *wal.Store, first, last uint64) error {
	batch := make([]*hraft.Log, 0, 1024)
	for i := first; i <= last; i++ {
		l := new(hraft.Log)
		if err := from.GetLog(i, l); err != nil {
			return fmt.Errorf("raft: read old log entry %d: %w", i, err)
		}
		batch = append(batch, l)
		if len(batch) == cap(batch) || i == last {
			if err := to.StoreLogs(batch); err != nil {
				return fmt.Errorf("raft: copy log: %w", err)
			}
			batch = batch[:0]
		}
	}
	return nil
}
