package raft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"github.com/keel-kv/keel/raft/wal"
)

// A node that lost Raft state it may have acknowledged must not vote: an empty voter
// grants its vote to any candidate and can help elect a leader that misses a committed
// entry. Two files in the data dir, next to raft/ and outliving it, keep that rule:
//
//	raft-member   written before this node first stores a log entry, a term or a vote
//	              (and at once when it opens existing state): it has been a member
//	raft-rejoin   written by MoveStateAside after the cluster removed this node: the
//	              state was moved aside; rejoin as a non-voter (a RejoinRecord)
//
// Open refuses to start with no Raft state when raft-member exists and raft-rejoin
// does not (ErrStateLost): the state was lost or removed by hand, and the cluster may
// still count this node as a voter. It refuses a data dir that lost a part of its
// state the same way (statecheck.go). With raft-rejoin it starts empty, asks the peers
// to add it as a non-voter, catches up (a snapshot, then the log), asks to be promoted
// once it has applied the leader's commit index, and removes raft-rejoin once it is a
// voter again.
const (
	memberFile = "raft-member"
	rejoinFile = "raft-rejoin"
)

// ErrStateLost: the data dir has held Raft state and lost it, all of it or a part (the
// log, the stable store, a snapshot: statecheck.go), and the node was not rebuilt
// (MoveStateAside): it may have acknowledged entries, or cast a vote, it no longer has.
var ErrStateLost = errors.New("raft: this data dir has lost raft state it held")

// RejoinRecord is the content of raft-rejoin (JSON).
type RejoinRecord struct {
	NodeID string `json:"node_id"`
	// MovedTo is where the old Raft state went ("" when there was none).
	MovedTo string `json:"moved_to,omitempty"`
	// Peers are Raft addresses of members to ask to add this node, used when the
	// agent gives no -join.
	Peers []string  `json:"peers,omitempty"`
	At    time.Time `json:"at"`
}

// MoveStateAside prepares the data dir of a damaged node for a rebuild from its peers.
// With the Raft state locked (it fails, changing nothing, while a process has it open)
// it calls remove, which must take this node out of the cluster's Raft configuration
// and return only once that change is committed; its error aborts with nothing
// changed (it may fill in rec.Peers). Then it moves the Raft state (the WAL, raft.db, snapshots) to
// <dataDir>/damaged-<time>/raft, never deleting it, and writes raft-rejoin, so the
// next Open starts empty and rejoins as a non-voter. Running it again after a failure
// is safe.
func MoveStateAside(dataDir string, rec RejoinRecord, remove func(*RejoinRecord) error) (RejoinRecord, error) {
	dir := filepath.Join(dataDir, "raft")
	unlock, err := lockState(dir)
	if err != nil {
		return rec, err
	}
	defer unlock()
	if err := remove(&rec); err != nil {
		return rec, err
	}
	if _, err := os.Stat(dir); err == nil {
		dest := filepath.Join(dataDir, "damaged-"+rec.At.UTC().Format("20060102T150405.000Z"))
		if err := os.MkdirAll(dest, 0o700); err != nil {
			return rec, fmt.Errorf("raft: move state aside: %w", err)
		}
		if err := os.Rename(dir, filepath.Join(dest, "raft")); err != nil {
			return rec, fmt.Errorf("raft: move state aside: %w", err)
		}
		rec.MovedTo = dest
		if err := syncDirs(dest, dataDir); err != nil {
			return rec, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("raft: %w", err)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return rec, err
	}
	return rec, writeFileSync(dataDir, rejoinFile, append(b, '\n'))
}

// lockState takes raft.db's lock (bolt's flock) shared, failing at once when a running
// node holds it; unlock releases it. A raft.db bolt cannot open (damaged, or none)
// holds no lock to take.
func lockState(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "raft.db")
	if _, err := os.Stat(path); err != nil {
		return func() {}, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("raft: %s is in use: stop the node first", path)
	}
	if err != nil {
		return func() {}, nil
	}
	return func() { db.Close() }, nil
}

func syncDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := (wal.OSFS{}).SyncDir(d); err != nil {
			return fmt.Errorf("raft: sync %s: %w", d, err)
		}
	}
	return nil
}

// writeFileSync writes dir/name durably: a temporary file, fsync, rename, fsync of dir.
func writeFileSync(dir, name string, data []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("raft: write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("raft: write %s: %w", name, err)
	}
	return syncDirs(dir)
}

func readRejoin(dataDir string) (*RejoinRecord, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, rejoinFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	var rec RejoinRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("raft: %s: %w", filepath.Join(dataDir, rejoinFile), err)
	}
	return &rec, nil
}

// memberMark writes raft-member once, before the first entry, term or vote is stored.
type memberMark struct {
	dataDir string
	mu      sync.Mutex
	done    bool
}

func (m *memberMark) mark() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return nil
	}
	if _, err := os.Stat(filepath.Join(m.dataDir, memberFile)); err != nil {
		msg := []byte("this data dir has held raft state: started without it, the node must be rebuilt (keel rebuild)\n")
		if err := writeFileSync(m.dataDir, memberFile, msg); err != nil {
			return err
		}
	}
	m.done = true
	return nil
}

func (m *memberMark) exists() bool {
	_, err := os.Stat(filepath.Join(m.dataDir, memberFile))
	return err == nil
}

// markingLogs and markingStable mark the data dir before they store anything.
type markingLogs struct {
	hraft.LogStore
	m *memberMark
}

func (s markingLogs) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

func (s markingLogs) StoreLogs(logs []*hraft.Log) error {
	if err := s.m.mark(); err != nil {
		return err
	}
	return s.LogStore.StoreLogs(logs)
}

// StoreLogsAsync passes the leader's write-while-replicating path (hraft.AsyncLogStore)
// through to the log, which stores synchronously when it has no such path.
func (s markingLogs) StoreLogsAsync(logs []*hraft.Log) (func() error, error) {
	if err := s.m.mark(); err != nil {
		return nil, err
	}
	if as, ok := s.LogStore.(hraft.AsyncLogStore); ok {
		return as.StoreLogsAsync(logs)
	}
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

type markingStable struct {
	hraft.StableStore
	m *memberMark
}

func (s markingStable) Set(k, v []byte) error {
	if err := s.m.mark(); err != nil {
		return err
	}
	return s.StableStore.Set(k, v)
}

// SetUint64 of 0 is no state: hashicorp/raft's NewRaft stores term 0 on every start.
func (s markingStable) SetUint64(k []byte, v uint64) error {
	if v == 0 {
		return s.StableStore.SetUint64(k, v)
	}
	if err := s.m.mark(); err != nil {
		return err
	}
	return s.StableStore.SetUint64(k, v)
}

// checkState applies the rules above before hashicorp/raft starts on the state.
func (n *Node) checkState(existing bool) error {
	if existing {
		return n.mark.mark()
	}
	if n.rejoin == nil && n.mark.exists() {
		return fmt.Errorf("%w: all of it (%s exists; %s holds none): it may have acknowledged entries it no longer has, "+
			"and the cluster may still count it as a voter; rebuild it from its peers (keel rebuild)",
			ErrStateLost, filepath.Join(n.cfg.DataDir, memberFile), filepath.Join(n.cfg.DataDir, "raft"))
	}
	return nil
}

// Rejoining reports whether this node is being rebuilt from its peers: it started from
// a data dir MoveStateAside prepared and is not a voter again yet.
func (n *Node) Rejoining() bool { return n.rejoining.Load() }

// startRejoin starts rejoinLoop for a node started from a data dir MoveStateAside
// prepared; it asks the -join members, or else the ones the record names.
func (n *Node) startRejoin(existing bool) {
	peers := n.cfg.Join
	if len(peers) == 0 {
		peers = n.rejoin.Peers
	}
	n.rejoining.Store(true)
	n.log.Warn("rebuilding this node from its peers: it rejoins as a non-voter and is promoted once caught up",
		"state_moved_to", n.rejoin.MovedTo, "peers", peers, "has_state", existing)
	n.wg.Add(1)
	go n.rejoinLoop(peers)
}

// rejoinLoop brings a rebuilt node back: it asks the peers to add it as a non-voter
// until it is in the configuration, then, once its log has caught up with the leader's
// commit index, asks to be promoted, and once it is a voter removes raft-rejoin.
func (n *Node) rejoinLoop(peers []string) {
	defer n.wg.Done()
	body := []byte(n.cfg.NodeID + "\x00" + n.addr)
	for attempt := 1; ; attempt++ {
		var err error
		if _, in := n.self(); in {
			var voter bool
			if voter, err = n.promoteWhenCaughtUp(); voter {
				n.rejoinDone()
				return
			}
		} else {
			err = n.askPeers(peers, rpcAddNonvoter, body)
		}
		if err != nil && (attempt == 1 || attempt%20 == 0) {
			n.log.Warn("rejoining after a rebuild", "attempt", attempt, "error", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (n *Node) self() (Member, bool) {
	for _, m := range *n.members.Load() {
		if m.ID == n.cfg.NodeID {
			return m, true
		}
	}
	return Member{}, false
}

func (n *Node) askPeers(peers []string, kind byte, body []byte) error {
	if len(peers) == 0 {
		return errors.New("no peer to ask (no -join, none in raft-rejoin): waiting to be added by a member")
	}
	var errs []error
	for _, addr := range peers {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		_, err := n.pool.call(ctx, addr, kind, body)
		cancel()
		if err == nil {
			n.log.Info("asked to rejoin as a non-voter", "via", addr)
			n.refreshMembers()
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return errors.Join(errs...)
}

// promoteWhenCaughtUp waits until this node's log holds every entry the leader had
// committed when asked (its commit index, which it takes from the leader only up to
// entries it has stored), then asks the leader to make it a voter; it reports whether
// it is one. The configuration this node holds is not asked: it can be an old one,
// from a snapshot it was sent, that still lists it as a voter. The log is what a vote
// is decided on; the state machine may trail it a little.
func (n *Node) promoteWhenCaughtUp() (voter bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	idx, err := n.readIndex(ctx)
	if err != nil {
		return false, err
	}
	if have := n.raft.CommitIndex(); have < idx {
		return false, fmt.Errorf("catching up: has %d of the %d committed entries", have, idx)
	}
	// The leader checks its own configuration: a voter already is left as it is.
	if err := n.AddVoter(ctx, n.cfg.NodeID, n.addr); err != nil {
		return false, err
	}
	n.log.Info("caught up after the rebuild: a voter again", "commit_index", idx)
	n.refreshMembers()
	return true, nil
}

func (n *Node) rejoinDone() {
	if err := os.Remove(filepath.Join(n.cfg.DataDir, rejoinFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Warn("rebuild done, but raft-rejoin stays", "error", err)
		return
	}
	syncDirs(n.cfg.DataDir)
	n.rejoining.Store(false)
	n.log.Info("rebuild from the peers done: a voter again")
}
