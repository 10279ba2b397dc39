package raft

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	hraft "github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// A node's Raft state is three parts in raft/: the log (wal/), the stable store
// (raft.db: term and vote) and the snapshots (snapshots/). Losing any one is losing
// state the node may have acknowledged or voted with, as losing all of them is
// (rejoin.go): Open refuses with ErrStateLost, naming the part, and the node must be
// rebuilt from its peers (keel rebuild). A lost part is told from a legitimate state
// by what the other parts record:
//
//	raft.db missing        while wal/ or snapshots/ exists: every release creates
//	                       raft.db first (before wal/ and snapshots/), never removes it
//	raft.db behind         its term is older than the log's last entry or the newest
//	                       snapshot: raft stores a term before any entry or snapshot
//	                       of it, so this raft.db is not the one the log was written with
//	wal/ missing           raft.db holds keyLogInWAL (written once the log is in a
//	                       WAL, by every release since #34), or a term with no log in
//	                       raft.db (a release before #34 that had moved its log out);
//	                       only a raft.db with its log inside and no mark is the layout
//	                       of a release before the WAL, which openLogStore migrates
//	snapshot missing       the log starts after index N+1 and no intact snapshot is at
//	                       or past N; or raft.db's keySnapshotIndex (the newest
//	                       snapshot this node ever stored) is past both the log's end
//	                       and every intact snapshot
//
// Every check runs before hashicorp/raft starts on the state, and a refused start
// changes nothing on disk.
var (
	// keyLogInWAL in raft.db: 1 once the log lives in wal/ (0 or absent: not yet).
	keyLogInWAL = []byte("KeelLogInWAL")
	// keySnapshotIndex in raft.db: the index of the newest snapshot stored.
	keySnapshotIndex = []byte("KeelSnapshotIndex")
	// keyCurrentTerm is hashicorp/raft's key for the current term.
	keyCurrentTerm = []byte("CurrentTerm")
)

// stateLost is the error of a start on Raft state with a part missing: part says which
// and where, why how that is known.
func stateLost(part, why string) error {
	return fmt.Errorf("%w: %s: %s. The node may have acknowledged entries or cast a vote "+
		"it no longer has, and the cluster may still count it as a voter; rebuild it from its peers (keel rebuild)",
		ErrStateLost, part, why)
}

// getUint64 reads key from the stable store; absent is 0.
func getUint64(bolt *raftboltdb.BoltStore, key []byte) (uint64, error) {
	v, err := bolt.GetUint64(key)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("raft: read %s from raft.db: %w", key, err)
	}
	return v, nil
}

// checkStableStorePresent runs before raft.db is opened (which would create it): a
// missing raft.db next to a WAL or a snapshot was lost.
func checkStableStorePresent(dir string) error {
	path := filepath.Join(dir, "raft.db")
	if _, err := os.Stat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var other []string
	if _, err := os.Stat(filepath.Join(dir, walDir)); err == nil {
		other = append(other, filepath.Join(dir, walDir))
	}
	// Every release creates snapshots/ (empty until the first snapshot) after raft.db:
	// it tells a lost raft.db also in a data dir that lost its WAL too, and in one of a
	// release before raft-member, which has nothing else to tell it by.
	if _, err := os.Stat(filepath.Join(dir, "snapshots")); err == nil {
		other = append(other, filepath.Join(dir, "snapshots"))
	}
	if len(other) == 0 {
		return nil
	}
	return stateLost(fmt.Sprintf("the stable store (%s: term and vote) is missing", path),
		fmt.Sprintf("%s exist, and raft.db is created before them and never removed", strings.Join(other, " and ")))
}

// checkStateParts checks that the log, the stable store and the snapshots of dir are
// parts of one state (see above).
func checkStateParts(dir string, bolt *raftboltdb.BoltStore, logs hraft.LogStore, snaps hraft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	var lastTerm uint64
	if last > 0 {
		var l hraft.Log
		if err := logs.GetLog(last, &l); err != nil {
			return fmt.Errorf("raft: read the last log entry %d: %w", last, err)
		}
		lastTerm = l.Term
	}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("raft: list snapshots: %w", err)
	}
	// List has the newest first; an intact one has its state file, whole.
	var newestTerm, intact uint64
	haveIntact := false
	for _, m := range metas {
		newestTerm = max(newestTerm, m.Term)
		if haveIntact {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, "snapshots", m.ID, "state.bin")); err == nil && fi.Size() == m.Size {
			intact, haveIntact = m.Index, true
		}
	}
	term, err := getUint64(bolt, keyCurrentTerm)
	if err != nil {
		return err
	}
	if term < lastTerm || term < newestTerm {
		return stateLost(fmt.Sprintf("the stable store (%s: term and vote) is lost or replaced", filepath.Join(dir, "raft.db")),
			fmt.Sprintf("it records term %d, but the log's last entry is of term %d and the newest snapshot of term %d: "+
				"this raft.db is empty or older than the log (raft stores a term before any entry of it)",
				term, lastTerm, newestTerm))
	}
	if last > 0 && first > 1 && (!haveIntact || intact+1 < first) {
		have := "no intact snapshot"
		if haveIntact {
			have = fmt.Sprintf("the newest intact snapshot is at index %d", intact)
		}
		return stateLost(fmt.Sprintf("a snapshot (in %s) is missing", filepath.Join(dir, "snapshots")),
			fmt.Sprintf("the log starts at index %d, so entries up to %d must be in a snapshot, and %s", first, first-1, have))
	}
	recorded, err := getUint64(bolt, keySnapshotIndex)
	if err != nil {
		return err
	}
	if recorded > max(last, intact) {
		return stateLost(fmt.Sprintf("the snapshot at index %d (in %s) is missing", recorded, filepath.Join(dir, "snapshots")),
			fmt.Sprintf("raft.db records that this node stored it, and neither an intact snapshot nor the log (last index %d) reach it", last))
	}
	return nil
}

// recordingSnapshots records in raft.db the index of every snapshot it stores, once
// the snapshot is durable (keySnapshotIndex).
type recordingSnapshots struct {
	hraft.SnapshotStore
	bolt *raftboltdb.BoltStore
}

func (s recordingSnapshots) Create(version hraft.SnapshotVersion, index, term uint64, configuration hraft.Configuration,
	configurationIndex uint64, trans hraft.Transport) (hraft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &recordingSink{SnapshotSink: sink, bolt: s.bolt, index: index}, nil
}

type recordingSink struct {
	hraft.SnapshotSink
	bolt  *raftboltdb.BoltStore
	index uint64
}

func (s *recordingSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	old, err := getUint64(s.bolt, keySnapshotIndex)
	if err != nil {
		return err
	}
	if s.index <= old {
		return nil
	}
	if err := s.bolt.SetUint64(keySnapshotIndex, s.index); err != nil {
		return fmt.Errorf("raft: record snapshot %d in raft.db: %w", s.index, err)
	}
	return nil
}
