// Package migrate is keel's storage-version migrator: once every member of the cluster
// writes a resource in one encoding version (the StorageVersion record's
// commonEncodingVersion, condition AllEncodingVersionsEqual), the leader rewrites every
// stored object still encoded in another version into that one, so that old versions
// can be dropped from the schema.
//
// It reads with chunked scans at one revision (a snapshot-consistent view that costs
// O(chunk) per step) and rewrites a chunk in one transaction: a compare-and-swap on
// each object's mod revision as the scan read it (an object changed since was written
// by a client in the common version already and is skipped, never overwritten with
// stale content), on the StorageVersion record as the pass began (if it moved, the
// pass starts again), and on the migration record itself, whose new value — the
// checkpoint: revision, next key, counts, objects that cannot be converted — is part
// of the same transaction. So the counts always agree with what was written, an
// operator's abort (a write of the record) fences off the chunk in flight, and a new
// leader resumes exactly where the old one stopped. The migration ends when the state
// machine's exact per-encoding counts show no object outside the target version; a
// scan that finishes while some remain (say, a restored backup) starts another pass.
//
// Cluster-wide settings (automatic start, rate) live in a replicated record too; an
// operator starts, resumes and aborts migrations with Request and Abort. It must never
// write an object in a version some member cannot decode (it writes only the version
// every registered node already writes) and never rewrite without the compare-and-swap.
package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"

	"github.com/keel-kv/keel/fsm"
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
	// Chunk is how many objects one step scans and rewrites in one transaction
	// (default 100, at most fsm.MaxTxnOps-2).
	Chunk int
	// Rate bounds rewrites per second (default 500); negative means unlimited. It is
	// the initial value of the cluster-wide setting: the leader stores it with NoAuto
	// when no settings are stored yet, and from then on the stored settings rule.
	Rate int
	// NoAuto: the initial setting of automatic migrations is off (only an operator's
	// Request starts one).
	NoAuto bool
	// DryRun scans and counts what it would rewrite, and writes nothing but its status.
	DryRun bool
	// BlockedRetry: how long a migration blocked by objects that cannot be converted
	// waits before it scans again, in case they were fixed (default 1m).
	BlockedRetry time.Duration
	// KeyMembers, when set, is the members as key-migration transitions see them
	// (gossip); automatic advances ("advance: auto") need it (nil: none is taken).
	KeyMembers func() []KeyMember
	// Finished, when set, is called after a migration of resource succeeds (the agent
	// refreshes the StorageState record, so it stops listing the old versions at once).
	Finished func(ctx context.Context, resource string)
	// TracerProvider receives the migrator's spans (trace.go); nil: the global one,
	// a no-op unless the agent installed an exporter (-otlp-endpoint).
	TracerProvider trace.TracerProvider
}

// Migrator runs the migrations while this node leads.
type Migrator struct {
	cfg    Config
	log    hclog.Logger
	tracer trace.Tracer
	schema atomic.Pointer[versions.Schema] // cfg.Schema, or the last SetSchema
	cancel context.CancelFunc
	done   chan struct{}
	mu     struct {
		sync.Mutex
		rate    int           // the cluster-wide setting, as of the last step
		limiter *rate.Limiter // paces rewrites at rate (unused while rate < 0)
	}
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
	cfg.Chunk = min(cfg.Chunk, fsm.MaxTxnOps-2) // + the status and StorageVersion compares
	if cfg.Rate == 0 {
		cfg.Rate = 500
	}
	if cfg.BlockedRetry <= 0 {
		cfg.BlockedRetry = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Migrator{cfg: cfg, log: cfg.Logger, tracer: tracer(cfg.TracerProvider)}
	m.schema.Store(cfg.Schema)
	m.setRate(cfg.Rate)
	return m, nil
}

// SetSchema makes the migrator work on the resources of s from its next round (the
// node's schema was applied at run time). Safe for concurrent use.
func (m *Migrator) SetSchema(s *versions.Schema) {
	if s != nil {
		m.schema.Store(s)
	}
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

// DefaultSettings are the settings this migrator's config implies, in force until
// settings are stored.
func (m *Migrator) DefaultSettings() Settings {
	return Settings{Auto: !m.cfg.NoAuto, Rate: max(m.cfg.Rate, -1)}
}

func (m *Migrator) loop(ctx context.Context) {
	defer close(m.done)
	for {
		busy := false
		if m.cfg.Store.IsLeader() {
			m.storeDefaultSettings(ctx)
			for _, r := range m.schema.Load().Resources {
				more, err := m.Step(ctx, r)
				if err != nil && ctx.Err() == nil {
					m.log.Warn("migration step failed", "resource", r.Key(), "error", err)
				}
				busy = busy || more
			}
			busy = m.stepKeyMigrations(ctx) || busy
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

// storeDefaultSettings writes the cluster-wide settings from this leader's config
// when none are stored (the first leader of a cluster, or one upgraded from a release
// that kept them per node).
func (m *Migrator) storeDefaultSettings(ctx context.Context) {
	view, err := m.cfg.Store.View(ctx, fsm.Serializable)
	if err != nil {
		return
	}
	if s, err := ReadSettings(view); err != nil || s != nil {
		return
	}
	value, _ := json.Marshal(m.DefaultSettings())
	key := []byte(SettingsKey)
	if _, err := putRecord(ctx, m.cfg.Store, fsm.Compare{Key: key, Target: fsm.TargetModRevision,
		Result: fsm.CompareEqual, Int: 0}, fsm.Op{Type: fsm.OpPut, Key: key, Value: value}); err != nil && ctx.Err() == nil {
		m.log.Warn("store migration settings", "error", err)
	}
}

// settings returns the stored settings, or this migrator's defaults, and applies the
// rate to the limiter.
func (m *Migrator) settings(view *fsm.View) (Settings, error) {
	s, err := ReadSettings(view)
	if err != nil {
		return Settings{}, err
	}
	if s == nil {
		d := m.DefaultSettings()
		s = &d
	}
	m.setRate(s.Rate)
	return *s, nil
}

// Step advances r's migration by at most one chunk and records where it stands. It
// reports whether more work is waiting (the caller steps again without pausing).
// Only the leader should call it; a status write from a stale leader fails its CAS.
func (m *Migrator) Step(ctx context.Context, r *versions.Resource) (more bool, err error) {
	ctx, span := startSpan(ctx, m.tracer, spanStep, attribute.String("keel.resource", r.Key()))
	defer func() {
		span.SetAttributes(attribute.Bool("keel.more", more))
		endSpan(span, err)
	}()
	return m.step(ctx, r)
}

// step is Step, inside its span.
func (m *Migrator) step(ctx context.Context, r *versions.Resource) (more bool, err error) {
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return false, err
	}
	st, err := ReadStatus(view, r.Key())
	if err != nil {
		return false, err
	}
	if st == nil {
		st = &Status{Resource: r.Key()}
	}
	settings, err := m.settings(view)
	if err != nil {
		return false, err
	}
	sv, err := versions.StorageVersionAt(view, r.Key())
	if err != nil {
		return false, err
	}
	target, why := migrationTarget(sv)
	next := *st
	next.DryRun = m.cfg.DryRun
	switch {
	case st.State == StateAborted && !st.Requested:
		return false, nil // until an operator resumes it
	case target == "" && st.State == StateRunning:
		next.State, next.Message, next.ObjectsPerSecond, next.ETASeconds = StateFailed,
			"the migration into "+st.Target+" lost its target: "+why+"; it starts again once they agree", 0, 0
		m.log.Warn("migration failed", "resource", r.Key(), "version", st.Target, "reason", why)
		return false, m.save(ctx, &next, st)
	case target == "":
		if st.State != StateFailed {
			next.State = StateWaiting
		}
		next.Message = why
		return false, m.save(ctx, &next, st)
	}
	if st.State == StateAborted && st.Target == target {
		next.State, next.Requested, next.Message = StateRunning, false, "resumed by an operator"
		m.log.Info("migration resumed", "resource", r.Key(), "version", target, "pass", st.Pass)
	}
	if next.State != StateRunning || next.Target != target {
		started, err := m.begin(ctx, view, r, target, sv, st, settings)
		if started == nil || err != nil {
			return false, err
		}
		next = *started
	} else if next.StorageVersionRevision != sv.Revision {
		if err := m.restartPass(view, r, sv, &next); err != nil {
			return false, err
		}
	}
	if next.ScanRevision == 0 {
		return m.endPass(ctx, r, target, &next, st)
	}
	next.Message = ""
	switch err := m.chunk(ctx, view, r, &next); {
	case errors.Is(err, errStorageVersionChanged):
		return true, nil // the next step restarts the pass
	case err != nil:
		return false, err
	}
	return true, nil
}

// begin returns the status of a migration of r into target starting now, if one is
// due (automatic, or requested) and objects are left; otherwise (nil) it records
// success or why it waits.
func (m *Migrator) begin(ctx context.Context, view *fsm.View, r *versions.Resource, target string,
	sv *versions.StorageVersion, st *Status, settings Settings) (*Status, error) {
	next := *st
	next.DryRun = m.cfg.DryRun
	if !st.Requested {
		if !settings.Auto {
			if st.State == "" || st.State == StateWaiting {
				next.State = StateWaiting
				next.Message = "automatic migrations are off: POST /v1/migrations (keel migrate start) starts one"
				return nil, m.save(ctx, &next, st)
			}
			return nil, nil
		}
		// Nothing new to do, unless the record still says Waiting: the target came
		// back (a downgraded node left again) and what is stored must be counted to
		// say Succeeded.
		if st.Target == target && st.State != StateWaiting && !m.mayHaveWork(ctx, view, r, st) {
			return nil, nil
		}
	}
	// Count exactly what is left (the KEP's trigger: a persisted storage version hash
	// other than the current one); start a pass if anything is.
	ss, err := m.countState(view, r, target, &next)
	if err != nil {
		return nil, err
	}
	if len(next.Remaining) == 0 {
		m.finish(&next, r, target, view)
		return nil, m.save(ctx, &next, st)
	}
	now := time.Now().UTC()
	next = Status{Resource: r.Key(), State: StateRunning, Target: target, ScanRevision: view.Revision(),
		StorageVersionRevision: sv.Revision, Pass: 1, Remaining: next.Remaining, Total: next.Total,
		DryRun: m.cfg.DryRun, Started: now, Conditions: st.Conditions, Revision: st.Revision,
		Progress: observe(nil, 0, now), Reason: startReason(ss, r, target, st.Requested)}
	m.log.Info("migration started", "resource", r.Key(), "version", target, "remaining", next.RemainingTotal(),
		"dry_run", m.cfg.DryRun, "requested", st.Requested, "reason", next.Reason)
	return &next, nil
}

// startReason says why a migration starts: the storage version hashes stored objects
// have against the current one, as the KEP's trigger compares them, e.g. "storage
// version hash changed from X (apps/v1) to Y (apps/v2)".
func startReason(ss *versions.StorageState, r *versions.Resource, target string, requested bool) string {
	why := fmt.Sprintf("storage version hash changed from %s to %s (%s/%s)", strings.Join(ss.StaleHashes(), ", "),
		versions.StorageVersionHash(r.Key(), target), r.Group, target)
	if requested {
		why = "requested by an operator; " + why
	}
	return why
}

// restartPass starts the pass again at view's revision: the StorageVersion record the
// pass began with has changed (a node came or went), so what it decided may no longer
// hold. Counts so far are kept.
func (m *Migrator) restartPass(view *fsm.View, r *versions.Resource, sv *versions.StorageVersion, st *Status) error {
	m.log.Info("StorageVersion record changed during the migration; restarting the pass", "resource", r.Key(),
		"pass", st.Pass+1)
	st.Pass++
	st.ScanRevision, st.NextKey, st.PassScanned = view.Revision(), nil, 0
	st.StorageVersionRevision = sv.Revision
	return m.count(view, r, st.Target, st)
}

// endPass decides, from an exact count taken after the pass's last rewrites, what
// follows a finished pass: success, blocked on poison objects, the end of a dry run,
// or another pass (more) for objects the pass did not see (a restore).
func (m *Migrator) endPass(ctx context.Context, r *versions.Resource, target string, st, old *Status) (more bool, err error) {
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return false, err
	}
	if err := m.count(view, r, target, st); err != nil {
		return false, err
	}
	st.ObjectsPerSecond, st.ETASeconds = 0, 0
	if left := st.RemainingTotal(); m.cfg.DryRun || left == 0 || left <= int64(len(st.Poison)) {
		st.Progress = nil // no longer running
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
		st.ScanRevision, st.PassScanned = view.Revision(), 0
		more = true
	}
	if err := m.save(ctx, st, old); err != nil {
		return false, err
	}
	if st.State == StateSucceeded && m.cfg.Finished != nil {
		m.cfg.Finished(ctx, r.Key())
	}
	return more, nil
}

// migrationTarget is the version to migrate into: the common encoding version, once
// every registered node not only prefers it but already writes it (a node switches its
// effective version only when every member decodes it). Otherwise "" and why not.
func migrationTarget(sv *versions.StorageVersion) (string, string) {
	if sv == nil || sv.Revision == 0 {
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
	st.State, st.Target, st.NextKey, st.ScanRevision, st.Requested = StateSucceeded, target, nil, 0, false
	st.CheckedRevision = view.Revision()
	st.Message = fmt.Sprintf("every stored object is in %s", target)
}

// count sets st.Remaining and st.Total exactly from view (O(objects of r)).
func (m *Migrator) count(view *fsm.View, r *versions.Resource, target string, st *Status) error {
	_, err := m.countState(view, r, target, st)
	return err
}

// countState is count, returning the storage state (with target current) it counted.
func (m *Migrator) countState(view *fsm.View, r *versions.Resource, target string, st *Status) (*versions.StorageState, error) {
	state, err := versions.ComputeStorageState(view, r, target)
	if err != nil {
		return nil, err
	}
	st.Remaining, st.Total = map[string]int64{}, 0
	for v, n := range state.ObjectCounts {
		st.Total += n
		if v != target && n > 0 {
			st.Remaining[v] = n
		}
	}
	return state, nil
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
	current := versions.StorageVersionHash(r.Key(), st.Target)
	for v, n := range versions.TagCounts(view, r.Key()) {
		if n > 0 && versions.StorageVersionHash(r.Key(), v) != current {
			return true
		}
	}
	// The record's persisted hashes (filled in from the names in a record of an older
	// release), where objects without a tag show.
	ss, err := versions.ReadStorageState(ctx, m.cfg.Store, r.Key())
	if err != nil || ss == nil || ss.ObservedRevision <= st.CheckedRevision {
		return err != nil
	}
	for _, h := range ss.PersistedStorageVersionHashes {
		if v := ss.VersionOfHash(h); h != current && ss.ObjectCounts[v] > 0 {
			return true
		}
	}
	return false
}
