// Package migrate is keel's storage-version migrator: once every member of the cluster
// writes a resource in one encoding version (the StorageVersion record's
// commonEncodingVersion, condition AllEncodingVersionsEqual), the leader rewrites every
// stored object still encoded in another version into that one, so that old versions
// can be dropped from the schema.
//
// It reads with chunked scans at one revision (a snapshot-consistent view that costs
// O(chunk) per step) and rewrites each object with a compare-and-swap on the mod
// revision it read: an object changed since the scan's revision was written by a client
// in the common version already and is skipped, never overwritten with stale content.
// Progress — revision, next key, counts, objects that cannot be converted — is a record
// replicated through Raft after every chunk, so a new leader resumes where the old one
// stopped. The migration ends when the state machine's exact per-encoding counts show
// no object outside the target version; a scan that finishes while some remain (say, a
// restored backup) starts another pass.
package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Store is what the migrator needs from the replicated store, the same as the
// storage-version manager's; *raft.Node satisfies it.
type Store = versions.Store

// Config configures a Migrator.
type Config struct {
	Schema *versions.Schema
	Store  Store
	Logger hclog.Logger
	// Interval between rounds when there is nothing to do (default 1s).
	Interval time.Duration
	// Chunk is how many objects one step scans (default 100).
	Chunk int
	// Rate bounds rewrites per second (default 500), so a migration never crowds out
	// client writes; 0 takes the default, negative means unlimited.
	Rate int
	// DryRun scans and counts what it would rewrite, and writes nothing but its status.
	DryRun bool
	// BlockedRetry: how long a migration blocked by objects that cannot be converted
	// waits before it scans again, in case they were fixed (default 1m).
	BlockedRetry time.Duration
	// Finished, when set, is called after a migration of resource succeeds (the agent
	// refreshes the StorageState record, so it stops listing the old versions at once).
	Finished func(ctx context.Context, resource string)
}

// State is where a resource's migration stands.
type State string

const (
	// StateWaiting: the members do not agree on one encoding version yet.
	StateWaiting State = "Waiting"
	// StateRunning: objects outside the target version are being rewritten.
	StateRunning State = "Running"
	// StateSucceeded: every stored object is in the target version.
	StateSucceeded State = "Succeeded"
	// StateBlocked: what is left cannot be converted (see Poison).
	StateBlocked State = "Blocked"
	// StateDryRun: a dry run finished; Migrated counts what it would have rewritten.
	StateDryRun State = "DryRunComplete"
)

// maxPoison bounds the objects listed as impossible to migrate.
const maxPoison = 100

// Poison is an object the migrator cannot rewrite (its stored form does not decode or
// convert); it is listed once, not retried in a loop.
type Poison struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// Status is the replicated record of one resource's migration, under
// StatusKey(resource).
type Status struct {
	Resource string `json:"resource"`
	State    State  `json:"state"`
	// Target is the version objects are rewritten into.
	Target string `json:"target,omitempty"`
	// ScanRevision and NextKey are the checkpoint: the pass reads at ScanRevision and
	// resumes at NextKey.
	ScanRevision int64  `json:"scanRevision,omitempty"`
	NextKey      []byte `json:"nextKey,omitempty"`
	Pass         int    `json:"pass,omitempty"`
	// CheckedRevision is the revision of the last exact count that ended a pass.
	CheckedRevision int64 `json:"checkedRevision,omitempty"`
	// Counts of this migration (all passes).
	Scanned  int64 `json:"scanned"`
	Migrated int64 `json:"migrated"`
	// Skipped: changed or deleted since the scan's revision (the newer write is in the
	// target version already).
	Skipped int64    `json:"skipped"`
	Poison  []Poison `json:"poison,omitempty"`
	// Remaining counts stored objects per version other than Target, exactly, as of
	// the last step.
	Remaining map[string]int64 `json:"remaining,omitempty"`
	Total     int64            `json:"total"`
	DryRun    bool             `json:"dryRun,omitempty"`
	Message   string           `json:"message,omitempty"`
	Started   time.Time        `json:"started,omitzero"`
	Updated   time.Time        `json:"updated,omitzero"`
	Finished  time.Time        `json:"finished,omitzero"`
	// Revision is the record's mod revision (set on read; the CAS precondition).
	Revision int64 `json:"-"`
}

// RemainingTotal is the number of stored objects not yet in the target version.
func (s *Status) RemainingTotal() int64 {
	var n int64
	for _, c := range s.Remaining {
		n += c
	}
	return n
}

// StatusKey is where the migration status of resource ("group/name") is stored.
func StatusKey(resource string) string { return versions.SystemPrefix + "migrations/" + resource }

// ReadStatus reads the migration status of resource from view; nil when none.
func ReadStatus(view *fsm.View, resource string) (*Status, error) {
	kv, err := view.Get([]byte(StatusKey(resource)), 0)
	if errors.Is(err, fsm.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(kv.Value, &s); err != nil {
		return nil, fmt.Errorf("migrate: status of %s: %w", resource, err)
	}
	s.Revision = kv.ModRevision
	return &s, nil
}

// Migrator runs the migrations while this node leads.
type Migrator struct {
	cfg    Config
	log    hclog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	tokens float64 // rate limiter
	last   time.Time
}

// New validates cfg.
func New(cfg Config) (*Migrator, error) {
	if cfg.Schema == nil || cfg.Store == nil {
		return nil, errors.New("migrate: Schema and Store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = 100
	}
	if cfg.Chunk > fsm.MaxTxnOps {
		cfg.Chunk = fsm.MaxTxnOps
	}
	if cfg.Rate == 0 {
		cfg.Rate = 500
	}
	if cfg.BlockedRetry <= 0 {
		cfg.BlockedRetry = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Migrator{cfg: cfg, log: cfg.Logger}, nil
}

// Start runs the migrator in the background until Close.
func (m *Migrator) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	go m.loop(ctx)
}

// Close stops the migrator and waits for its current step.
func (m *Migrator) Close() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
}

func (m *Migrator) loop(ctx context.Context) {
	defer close(m.done)
	for {
		busy := false
		if m.cfg.Store.IsLeader() {
			for _, r := range m.cfg.Schema.Resources {
				more, err := m.Step(ctx, r)
				if err != nil && ctx.Err() == nil {
					m.log.Warn("migration step failed", "resource", r.Key(), "error", err)
				}
				busy = busy || more
			}
		}
		wait := m.cfg.Interval
		if busy {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Step advances r's migration by at most one chunk and records where it stands. It
// reports whether more work is waiting (the caller steps again without pausing).
// Only the leader should call it; a status write from a stale leader fails its CAS.
func (m *Migrator) Step(ctx context.Context, r *versions.Resource) (more bool, err error) {
	view, err := m.cfg.Store.View(ctx, raft.Linearizable)
	if err != nil {
		return false, err
	}
	st, err := ReadStatus(view, r.Key())
	if err != nil {
		return false, err
	}
	prevRev := int64(0)
	if st != nil {
		prevRev = st.Revision
	} else {
		st = &Status{Resource: r.Key()}
	}
	now := time.Now().UTC()
	sv, err := versions.ReadStorageVersion(ctx, m.cfg.Store, r.Key())
	if err != nil {
		return false, err
	}
	target, why := migrationTarget(sv)
	next := *st
	next.DryRun = m.cfg.DryRun
	if target == "" {
		next.State, next.Message = StateWaiting, why
		return false, m.save(ctx, &next, prevRev, st)
	}
	if st.State != StateRunning || st.Target != target {
		if st.Target == target && !m.mayHaveWork(ctx, view, r, st) {
			return false, nil
		}
		// Count exactly what is left; start a pass if anything is.
		if err := m.count(view, r, target, &next); err != nil {
			return false, err
		}
		if len(next.Remaining) == 0 {
			m.finish(&next, r, target, view)
			return false, m.save(ctx, &next, prevRev, st)
		}
		next = Status{Resource: r.Key(), State: StateRunning, Target: target, ScanRevision: view.Revision(),
			Pass: 1, Remaining: next.Remaining, Total: next.Total, DryRun: m.cfg.DryRun, Started: now}
		m.log.Info("migration started", "resource", r.Key(), "version", target, "remaining", next.RemainingTotal(),
			"dry_run", m.cfg.DryRun)
	}
	next.Message = ""
	if err := m.chunk(ctx, view, r, &next); err != nil {
		return false, err
	}
	if next.ScanRevision != 0 {
		return true, m.save(ctx, &next, prevRev, st)
	}
	more, err = m.endPass(ctx, r, target, &next)
	if err != nil {
		return false, err
	}
	if err := m.save(ctx, &next, prevRev, st); err != nil {
		return false, err
	}
	if next.State == StateSucceeded && m.cfg.Finished != nil {
		m.cfg.Finished(ctx, r.Key())
	}
	return more, nil
}

// endPass decides, from an exact count taken after the pass's last rewrites, what
// follows a finished pass: success, blocked on poison objects, the end of a dry run,
// or another pass (more) for objects the pass did not see (a restore).
func (m *Migrator) endPass(ctx context.Context, r *versions.Resource, target string, st *Status) (more bool, err error) {
	view, err := m.cfg.Store.View(ctx, raft.Linearizable)
	if err != nil {
		return false, err
	}
	if err := m.count(view, r, target, st); err != nil {
		return false, err
	}
	switch left := st.RemainingTotal(); {
	case m.cfg.DryRun:
		st.State, st.Finished, st.CheckedRevision = StateDryRun, time.Now().UTC(), view.Revision()
		st.Message = fmt.Sprintf("dry run: %d objects would be rewritten into %s", st.Migrated, target)
	case left == 0:
		m.finish(st, r, target, view)
	case left <= int64(len(st.Poison)):
		st.State, st.CheckedRevision = StateBlocked, view.Revision()
		st.Message = fmt.Sprintf("%d objects cannot be converted to %s (listed under poison); fix or delete them, "+
			"the migrator looks again every %v", left, target, m.cfg.BlockedRetry)
		m.log.Warn("migration blocked by objects that cannot be converted", "resource", r.Key(), "objects", left)
	default:
		st.Pass++
		st.ScanRevision = view.Revision()
		return true, nil
	}
	return false, nil
}

// migrationTarget is the version to migrate into: the common encoding version, once
// every registered node not only prefers it but already writes it (a node switches its
// effective version only when every member decodes it). Otherwise "" and why not.
func migrationTarget(sv *versions.StorageVersion) (string, string) {
	if sv == nil {
		return "", "no StorageVersion record yet"
	}
	if c, ok := sv.Condition(versions.ConditionAllEncodingVersionsEqual); !ok || c.Status != "True" || sv.CommonEncodingVersion == "" {
		return "", "the members do not agree on one encoding version yet"
	}
	for _, e := range sv.StorageVersions {
		if e.EffectiveEncodingVersion != sv.CommonEncodingVersion {
			return "", fmt.Sprintf("node %s still writes %q, not the common version %s", e.NodeID,
				e.EffectiveEncodingVersion, sv.CommonEncodingVersion)
		}
	}
	return sv.CommonEncodingVersion, ""
}

func (m *Migrator) finish(st *Status, r *versions.Resource, target string, view *fsm.View) {
	if st.State != StateSucceeded || st.Target != target {
		st.Finished = time.Now().UTC()
		m.log.Info("migration complete", "resource", r.Key(), "version", target, "migrated", st.Migrated,
			"skipped", st.Skipped)
	}
	st.State, st.Target, st.NextKey, st.ScanRevision = StateSucceeded, target, nil, 0
	st.CheckedRevision = view.Revision()
	st.Message = fmt.Sprintf("every stored object is in %s", target)
}

// count sets st.Remaining and st.Total exactly from view (O(objects of r)).
func (m *Migrator) count(view *fsm.View, r *versions.Resource, target string, st *Status) error {
	state, err := versions.ComputeStorageState(view, r, target)
	if err != nil {
		return err
	}
	st.Remaining, st.Total = map[string]int64{}, 0
	for v, n := range state.ObjectCounts {
		st.Total += n
		if v != target && n > 0 {
			st.Remaining[v] = n
		}
	}
	return nil
}

// mayHaveWork is the cheap check of a finished (or blocked, or dry-run) migration:
// live encoding-tag counts outside the target, or a StorageState heartbeat newer than
// the last exact count that lists another version (objects without a tag, from a
// restored backup).
func (m *Migrator) mayHaveWork(ctx context.Context, view *fsm.View, r *versions.Resource, st *Status) bool {
	switch st.State {
	case StateBlocked:
		return time.Since(st.Updated) >= m.cfg.BlockedRetry
	case StateDryRun:
		return false
	}
	for v, n := range versions.TagCounts(view, r.Key()) {
		if n > 0 && v != st.Target {
			return true
		}
	}
	ss, err := versions.ReadStorageState(ctx, m.cfg.Store, r.Key())
	if err != nil || ss == nil || ss.ObservedRevision <= st.CheckedRevision {
		return err != nil
	}
	for v, n := range ss.ObjectCounts {
		if v != st.Target && n > 0 {
			return true
		}
	}
	return false
}

// chunk scans the next chunk of the pass and rewrites what is not in the target version.
func (m *Migrator) chunk(ctx context.Context, view *fsm.View, r *versions.Resource, st *Status) error {
	prefix := []byte(r.Prefix)
	start := prefix
	if len(st.NextKey) > 0 {
		start = st.NextKey
	}
	kvs, next, err := view.Range(start, fsm.PrefixEnd(prefix), st.ScanRevision, m.cfg.Chunk)
	if errors.Is(err, fsm.ErrCompacted) {
		// The pass's revision is compacted: go on from the same key at the latest
		// revision (KEP-365's inconsistent continue). Objects written meanwhile are in
		// the target version already, so nothing is missed that matters.
		m.log.Info("migration scan revision compacted; continuing at the latest revision",
			"resource", r.Key(), "revision", st.ScanRevision, "latest", view.Revision())
		st.ScanRevision = view.Revision()
		kvs, next, err = view.Range(start, fsm.PrefixEnd(prefix), st.ScanRevision, m.cfg.Chunk)
	}
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		st.Scanned++
		if r.StoredVersion(kv) == st.Target {
			continue
		}
		if m.cfg.DryRun {
			st.Migrated++ // would be
			continue
		}
		if err := m.wait(ctx); err != nil {
			return err
		}
		switch err := m.rewrite(ctx, r, kv, st.Target); {
		case errors.Is(err, errChanged):
			st.Skipped++
		case errors.Is(err, errPoison):
			if !slices.ContainsFunc(st.Poison, func(p Poison) bool { return p.Key == string(kv.Key) }) && len(st.Poison) < maxPoison {
				st.Poison = append(st.Poison, Poison{Key: string(kv.Key), Error: err.Error()})
			}
			m.log.Warn("migration: object cannot be rewritten", "key", string(kv.Key), "error", err)
		case err != nil:
			return err // replication trouble: the step is retried from the checkpoint
		default:
			st.Migrated++
			if from := r.StoredVersion(kv); st.Remaining[from] > 0 {
				st.Remaining[from]--
			}
		}
	}
	st.NextKey = next
	if next == nil {
		st.ScanRevision = 0
	}
	return nil
}

var (
	errChanged = errors.New("migrate: object changed since the scan")
	errPoison  = errors.New("migrate: object cannot be converted")
)

// rewrite stores kv's object in version target, if it still is what the scan read.
func (m *Migrator) rewrite(ctx context.Context, r *versions.Resource, kv fsm.KeyValue, target string) error {
	obj, err := versions.DecodeObject(kv.Value)
	if err != nil {
		return fmt.Errorf("%w: %v", errPoison, err)
	}
	out, _, err := r.Convert(obj, r.StoredVersion(kv), target)
	if err != nil {
		return fmt.Errorf("%w: %v", errPoison, err)
	}
	value, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("%w: %v", errPoison, err)
	}
	txn := &fsm.Txn{
		Compares: []fsm.Compare{{Key: kv.Key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: kv.ModRevision}},
		Success:  []fsm.Op{{Type: fsm.OpPut, Key: kv.Key, Value: value, Encoding: versions.EncodingTag(r.Key(), target)}},
	}
	res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return fmt.Errorf("%w: %v", errPoison, res.Err)
	}
	if !res.Succeeded {
		return errChanged
	}
	return nil
}

// wait takes one token of the rewrite rate.
func (m *Migrator) wait(ctx context.Context) error {
	if m.cfg.Rate < 0 {
		return nil
	}
	m.mu.Lock()
	now := time.Now()
	if !m.last.IsZero() {
		m.tokens = min(m.tokens+now.Sub(m.last).Seconds()*float64(m.cfg.Rate), float64(m.cfg.Rate))
	}
	m.last = now
	m.tokens--
	d := time.Duration(0)
	if m.tokens < 0 {
		d = time.Duration(-m.tokens / float64(m.cfg.Rate) * float64(time.Second))
	}
	m.mu.Unlock()
	if d == 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// save writes st when it differs from old (beyond timestamps), CAS on the record's
// revision prev (0: the record must not exist).
func (m *Migrator) save(ctx context.Context, st *Status, prev int64, old *Status) error {
	st.Revision = 0
	if prev != 0 && sameStatus(st, old) {
		return nil
	}
	st.Updated = time.Now().UTC()
	value, err := json.Marshal(st)
	if err != nil {
		return err
	}
	key := []byte(StatusKey(st.Resource))
	txn := &fsm.Txn{
		Compares: []fsm.Compare{{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: prev}},
		Success:  []fsm.Op{{Type: fsm.OpPut, Key: key, Value: value}},
	}
	res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	if !res.Succeeded {
		return errors.New("migrate: status changed under this step (another leader?); retrying")
	}
	return nil
}

func sameStatus(a, b *Status) bool {
	x, y := *a, *b
	x.Updated, y.Updated, x.Revision, y.Revision = time.Time{}, time.Time{}, 0, 0
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(bx, by)
}
