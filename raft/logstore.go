package raft

import (
	"errors"
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

// openLogStore opens the segment-file log of dir. A data directory written by a
// release before the WAL keeps its log in raft.db: it is copied into a new WAL once,
// built under a temporary name and renamed into place only when complete, so a crash
// during the copy leaves the old log in charge and the copy starts over. Once the WAL is
// in place raft.db is marked (keyLogInWAL), so a wal/ lost later is never taken for
// that layout (statecheck.go); a new data dir gets its empty WAL the same way.
func openLogStore(dir string, bolt *raftboltdb.BoltStore, opts wal.Options) (*wal.Store, error) {
	log := opts.Logger
	path := filepath.Join(dir, walDir)
	if _, err := os.Stat(path); err == nil {
		return wal.OpenWith(path, opts)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("raft: %w", err)
	}
	first, err := bolt.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("raft: read old log: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("raft: read old log: %w", err)
	}
	if err := checkWALLost(path, bolt, last); err != nil {
		return nil, err
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
	// A crash before the mark is written leaves a WAL and no mark: the next start marks it.
	if err := bolt.SetUint64(keyLogInWAL, 1); err != nil {
		return nil, fmt.Errorf("raft: mark raft.db: %w", err)
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

// checkWALLost decides, for a data dir without wal/, whether raft.db is the layout of a
// release before the WAL (last: the last index of the log in raft.db) or the WAL was
// lost. A raft.db marked keyLogInWAL had its log moved into the WAL. An unmarked one
// with a term and no log is of a release that already had the WAL (the mark came with
// #34): a release before the WAL kept every entry of its term in raft.db.
func checkWALLost(path string, bolt *raftboltdb.BoltStore, last uint64) error {
	marked, err := getUint64(bolt, keyLogInWAL)
	if err != nil {
		return err
	}
	if marked != 0 {
		return stateLost(fmt.Sprintf("the log (%s) is missing", path), "raft.db records that the log was moved into it")
	}
	term, err := getUint64(bolt, keyCurrentTerm)
	if err != nil {
		return err
	}
	if last == 0 && term > 0 {
		return stateLost(fmt.Sprintf("the log (%s) is missing", path),
			fmt.Sprintf("raft.db records term %d but holds no log: the log was in the WAL", term))
	}
	return nil
}

// markLogInWAL marks raft.db of a data dir that has a WAL and no mark (one of a release
// before #34, or one whose start crashed right after its WAL was put in place).
func markLogInWAL(bolt *raftboltdb.BoltStore) error {
	marked, err := getUint64(bolt, keyLogInWAL)
	if err != nil || marked != 0 {
		return err
	}
	if err := bolt.SetUint64(keyLogInWAL, 1); err != nil {
		return fmt.Errorf("raft: mark raft.db: %w", err)
	}
	return nil
}
