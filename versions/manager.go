package versions

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/fsm"
)

// Store is what the manager needs from the replicated store; *raft.Node satisfies it.
type Store interface {
	Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	View(ctx context.Context, c fsm.Consistency) (*fsm.View, error)
	IsLeader() bool
}

// Member is one node as membership sees it.
type Member struct {
	ID          string
	Incarnation uint64
	Alive       bool
	// Left: the member departed gracefully (gossip status left); its entries go at
	// the next round, without waiting GCAfter.
	Left bool
	// Since is when the member stopped being alive (zero while alive).
	Since time.Time
	// Decodable maps resource "group/name" to the versions the member's schema decodes,
	// from its gossip metadata; nil when unknown.
	Decodable map[string][]string
	// Release is the member's release, from its gossip metadata ("" when unknown).
	Release string
}

// Config configures a Manager.
type Config struct {
	NodeID      string
	Incarnation uint64
	Schema      *Schema
	Store       Store
	// Members returns the current membership; nil means this node alone.
	Members func() []Member
	// Joined reports whether this node has joined the membership (nil: always). Until
	// it has, nothing is registered: registration drops entries of nodes absent from
	// membership, and a node that has not met its peers yet would drop them all.
	Joined func() bool
	Logger hclog.Logger
	// Interval is the reconcile period (registration, effective encoding, GC).
	Interval time.Duration
	// GCAfter is how long a member must have been dead (or absent) before the leader
	// removes its entries (a member that left gracefully: at once).
	GCAfter time.Duration
	// HeartbeatInterval is how often the leader rewrites each StorageState.
	HeartbeatInterval time.Duration
}

// DefaultConfig returns the production periods: reconcile every second, entries of a
// dead node removed 10 s after gossip declares it dead, StorageState every 10 s.
func DefaultConfig() Config {
	return Config{Interval: time.Second, GCAfter: 10 * time.Second, HeartbeatInterval: 10 * time.Second}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("versions: config: empty node ID")
	case c.Schema == nil:
		return errors.New("versions: config: no schema")
	case c.Store == nil:
		return errors.New("versions: config: no store")
	case c.Interval <= 0 || c.GCAfter <= 0 || c.HeartbeatInterval <= 0:
		return fmt.Errorf("versions: config: interval %v, gc-after %v, heartbeat %v: all must be > 0",
			c.Interval, c.GCAfter, c.HeartbeatInterval)
	}
	return nil
}

// Manager registers this node's storage versions, keeps its effective encoding version
// safe for every live member, and — while this node leads — garbage-collects entries of
// departed nodes and maintains StorageState. Its methods are safe for concurrent use.
type Manager struct {
	cfg   Config
	log   hclog.Logger
	start time.Time

	// schema is the node's schema; ApplySchema replaces it (with mu held, together
	// with mu.res, so a resource of the schema always has its state).
	schema atomic.Pointer[Schema]
	mu     struct {
		sync.Mutex
		res map[string]*resourceState
	}

	applyMu sync.Mutex // serializes ApplySchema

	conflicts atomic.Int64 // registration compare-and-swaps that lost a race
	// kick asks the loop for a round now (after ApplySchema).
	kick chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Conflicts counts the registration compare-and-swaps that lost a race with another
// node's update (each was retried).
func (m *Manager) Conflicts() int64 { return m.conflicts.Load() }

// resourceState is the node's local standing for one resource.
type resourceState struct {
	registered bool
	// gated: the resource was added at run time (ApplySchema) and is not served until
	// every alive member has registered it (missing names those that have not).
	gated       bool
	missing     []string
	effective   string // version writes use; "" refuses writes (see effErr)
	heldBack    string // why effective is not the preferred version ("" when it is)
	effErr      error
	undecodable error // stored objects this node cannot decode
	lastErr     error // last registration failure
	attempts    int
}

// New validates cfg and returns a manager; Open starts it.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, start: time.Now(), kick: make(chan struct{}, 1)}
	m.schema.Store(cfg.Schema)
	m.mu.res = make(map[string]*resourceState)
	for _, r := range cfg.Schema.Resources {
		m.mu.res[r.Key()] = &resourceState{}
	}
	return m, nil
}

// Open starts the reconcile loop; Close stops it.
func (m *Manager) Open(ctx context.Context) {
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.cfg.Interval)
		defer t.Stop()
		for {
			m.Reconcile(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-m.kick:
			}
		}
	}()
}

// Close stops the loop and waits for it.
func (m *Manager) Close() {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
}

// Schema is the node's schema: the one it started with, or the last one ApplySchema
// accepted. The schema itself is immutable; callers may keep it.
func (m *Manager) Schema() *Schema { return m.schema.Load() }

// state returns the local standing of r; a resource ApplySchema removed meanwhile gets
// a throwaway one. Call with mu held.
func (m *Manager) stateLocked(r *Resource) *resourceState {
	if st, ok := m.mu.res[r.Key()]; ok {
		return st
	}
	return &resourceState{}
}

// Local returns this node's entry for every resource of its schema (what it reports
// in gossip metadata and registers).
func (m *Manager) Local() map[string]ServerStorageVersion {
	out := make(map[string]ServerStorageVersion)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.Schema().Resources {
		out[r.Key()] = m.entryLocked(r, m.stateLocked(r).effective)
	}
	return out
}

func (m *Manager) entryLocked(r *Resource, effective string) ServerStorageVersion {
	return ServerStorageVersion{NodeID: m.cfg.NodeID, Incarnation: m.cfg.Incarnation,
		EncodingVersion: r.Preferred, EffectiveEncodingVersion: effective,
		DecodableVersions: r.Decodable(), ServedVersions: r.Served()}
}

// WriteEncoding returns the version a write to resource (its "group/name") must be
// encoded in, or why the write must wait: ErrNotRegistered, ErrUndecodable,
// ErrNoCommonEncoding (all wrapped with the resource's name).
func (m *Manager) WriteEncoding(resource string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.mu.res[resource]
	switch {
	case !ok:
		return "", fmt.Errorf("%w: resource %s is not in this node's schema", ErrUnknownVersion, resource)
	case !st.registered:
		return "", fmt.Errorf("%w for resource: %s", ErrNotRegistered, resource)
	case st.gated:
		return "", st.gateErr(resource)
	case st.undecodable != nil:
		return "", st.undecodable
	case st.effective == "":
		return "", st.effErr
	}
	return st.effective, nil
}

// HeldBack says why writes of resource use an older version than the preferred one:
// which member cannot decode it (node ID, release, decodable versions) and what to do;
// "" when writes use the preferred version (or the resource is unknown).
func (m *Manager) HeldBack(resource string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.mu.res[resource]; ok {
		return st.heldBack
	}
	return ""
}

// ReadCheck returns an error when this node cannot serve reads of resource: stored
// objects use a version its schema cannot decode.
func (m *Manager) ReadCheck(resource string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.mu.res[resource]
	switch {
	case !ok:
		return nil
	case st.gated:
		return st.gateErr(resource)
	}
	return st.undecodable
}

// gateErr says why a resource added at run time is not served yet.
func (st *resourceState) gateErr(resource string) error {
	msg := "added at run time: served once every member has registered it"
	if len(st.missing) > 0 {
		msg += fmt.Sprintf(" (waiting for %s)", strings.Join(st.missing, ", "))
	}
	return fmt.Errorf("%w for resource: %s: %s", ErrNotRegistered, resource, msg)
}

// Ready returns nil once every resource is registered and decodable, or the first
// reason it is not (for /readyz).
func (m *Manager) Ready(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.Schema().Resources {
		st := m.stateLocked(r)
		if st.undecodable != nil {
			return st.undecodable
		}
		if !st.registered {
			msg := fmt.Sprintf("wait for storage version registration to complete for resource: %s", r.Key())
			switch {
			case st.lastErr != nil && st.attempts > 0:
				msg += fmt.Sprintf(" (%d attempts, last: %v)", st.attempts, st.lastErr)
			case st.lastErr != nil:
				msg += fmt.Sprintf(" (%v)", st.lastErr)
			}
			return errors.New(msg)
		}
	}
	return nil
}

// Reconcile runs one round: check stored encodings, register or re-register every
// resource whose entry is stale, then (on the leader) GC and StorageState. The loop
// calls it every Interval; tests call it directly.
func (m *Manager) Reconcile(ctx context.Context) {
	if m.cfg.Joined != nil && !m.cfg.Joined() {
		m.mu.Lock()
		for _, st := range m.mu.res {
			if !st.registered {
				st.lastErr = errors.New("waiting to join the cluster's membership")
			}
		}
		m.mu.Unlock()
		return
	}
	members := m.members()
	for _, r := range m.Schema().Resources {
		if ctx.Err() != nil {
			return
		}
		m.checkDecodable(ctx, r)
		if err := m.register(ctx, r, members); err != nil && ctx.Err() == nil {
			m.log.Warn("storage version registration", "resource", r.Key(), "error", err)
		}
	}
	leader := m.cfg.Store.IsLeader()
	if leader && ctx.Err() == nil {
		if err := m.collect(ctx, members); err != nil && ctx.Err() == nil {
			m.log.Warn("storage version gc", "error", err)
		}
	}
	if ctx.Err() == nil {
		m.maybeHeartbeat(ctx, leader)
	}
}

func (m *Manager) members() []Member {
	if m.cfg.Members == nil {
		return []Member{{ID: m.cfg.NodeID, Incarnation: m.cfg.Incarnation, Alive: true}}
	}
	return m.cfg.Members()
}

// checkDecodable marks the resource undecodable while the store holds objects in a
// version this node's schema does not declare. The state machine counts objects per
// encoding as writes apply, so this is exact and O(number of encodings).
func (m *Manager) checkDecodable(ctx context.Context, r *Resource) {
	view, err := m.cfg.Store.View(ctx, fsm.Serializable)
	if err != nil {
		return
	}
	stored := TagCounts(view, r.Key())
	// Untagged objects (data older than the resource) are known by the leader's last
	// StorageState scan.
	if ss, err := storageStateAt(view, r.Key()); err == nil {
		for _, v := range ss.PersistedEncodingVersions {
			if v != VersionUnknown && ss.ObjectCounts[v] > 0 {
				stored[v] = max(stored[v], ss.ObjectCounts[v])
			}
		}
	}
	var bad error
	for _, v := range slices.Sorted(maps.Keys(stored)) {
		if !r.HasVersion(v) {
			bad = fmt.Errorf("%w: resource %s has objects stored in version %s, which this node's schema (%s) cannot decode",
				ErrUndecodable, r.Key(), v, m.Schema().File)
			break
		}
	}
	m.mu.Lock()
	m.stateLocked(r).undecodable = bad
	m.mu.Unlock()
}

// register makes this node's entry for r current: it computes the effective encoding
// from every other member's decodable versions and CAS-writes the entry (removing
// entries of nodes absent from membership) until it sticks, backing off on conflicts.
// A switch to a newer effective version is published locally only after the entry
// announcing it is stored; a switch to an older one (a member that cannot decode the
// current one appeared) takes effect at once.
func (m *Manager) register(ctx context.Context, r *Resource, members []Member) error {
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		sv, err := ReadStorageVersion(ctx, m.cfg.Store, r.Key())
		if err != nil {
			return m.registerFailed(r, attempt, err)
		}
		effective, effErr := EffectiveEncoding(r, othersDecodable(sv, members, r.Key(), m.cfg.NodeID))
		held := heldBackBy(r, effective, sv, members, m.cfg.NodeID)
		m.mu.Lock()
		st := m.stateLocked(r)
		st.heldBack = held
		if effErr != nil || (st.effective != "" && st.effective != effective && !r.Newer(effective, st.effective)) {
			st.effective, st.effErr = effective, effErr
		}
		want := m.entryLocked(r, effective)
		m.mu.Unlock()
		if cur, ok := sv.Entry(m.cfg.NodeID); ok && entryEqual(cur, want) {
			m.registered(r, effective, effErr, unregistered(sv, members))
			return nil
		}
		next := *sv
		next.StorageVersions = slices.Clone(sv.StorageVersions)
		next.Upsert(want)
		for _, e := range sv.StorageVersions {
			if e.NodeID != m.cfg.NodeID && !memberKnown(members, e.NodeID) {
				next.Remove(e.NodeID)
			}
		}
		next.Recompute(time.Now())
		ok, err := m.cas(ctx, StorageVersionKey(r.Key()), sv.Revision, next.encode())
		if err != nil {
			return m.registerFailed(r, attempt, err)
		}
		if ok {
			m.log.Debug("registered storage version", "resource", r.Key(), "encoding", want.EncodingVersion,
				"effective", effective, "common", next.CommonEncodingVersion)
			m.registered(r, effective, effErr, unregistered(&next, members))
			return nil
		}
		m.conflicts.Add(1)
		m.registerFailed(r, attempt, errors.New("compare-and-swap conflict"))
		if attempt >= 8 {
			return fmt.Errorf("resource %s: %d compare-and-swap conflicts in a row; will retry", r.Key(), attempt)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// registered records a successful registration; missing lists the alive members
// without an entry (a resource added at run time is served once none is missing).
func (m *Manager) registered(r *Resource, effective string, effErr error, missing []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stateLocked(r)
	if !st.registered {
		m.log.Info("storage versions registered", "resource", r.Key(), "encoding", r.Preferred, "effective", effective)
	}
	st.registered, st.lastErr, st.attempts = true, nil, 0
	st.effective, st.effErr = effective, effErr
	st.missing = missing
	if st.gated && len(missing) == 0 {
		st.gated = false
		m.log.Info("every member registered the resource added at run time: serving it", "resource", r.Key())
	}
}

// unregistered lists the alive members (not leaving) that have no entry in sv.
func unregistered(sv *StorageVersion, members []Member) []string {
	var out []string
	for _, mb := range members {
		if !mb.Alive || mb.Left {
			continue
		}
		if _, ok := sv.Entry(mb.ID); !ok {
			out = append(out, mb.ID)
		}
	}
	slices.Sort(out)
	return out
}

func (m *Manager) registerFailed(r *Resource, attempt int, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stateLocked(r)
	st.lastErr = err
	st.attempts++
	return fmt.Errorf("resource %s attempt %d: %w", r.Key(), attempt, err)
}

func entryEqual(a, b ServerStorageVersion) bool {
	return a.NodeID == b.NodeID && a.Incarnation == b.Incarnation && a.EncodingVersion == b.EncodingVersion &&
		a.EffectiveEncodingVersion == b.EffectiveEncodingVersion &&
		slices.Equal(a.DecodableVersions, b.DecodableVersions) && slices.Equal(a.ServedVersions, b.ServedVersions)
}

// othersDecodable lists the decodable versions of every other node that counts: each
// registered entry (until GC removes it, a dead node still counts: objects it cannot
// decode must not be written while it may come back), and each alive member that has
// not registered yet but announces its versions in gossip.
func othersDecodable(sv *StorageVersion, members []Member, resource, self string) [][]string {
	var out [][]string
	seen := map[string]bool{self: true}
	for _, e := range sv.StorageVersions {
		if !seen[e.NodeID] {
			seen[e.NodeID] = true
			out = append(out, e.DecodableVersions)
		}
	}
	for _, mb := range members {
		if seen[mb.ID] || !mb.Alive {
			continue
		}
		if d, ok := mb.Decodable[resource]; ok {
			out = append(out, d)
		}
	}
	return out
}

// heldBackBy names the members that keep r's writes in effective rather than the
// preferred version: registered entries and alive members whose decodable versions
// lack it. "" when effective is the preferred version.
func heldBackBy(r *Resource, effective string, sv *StorageVersion, members []Member, self string) string {
	if effective == "" || effective == r.Preferred {
		return ""
	}
	release := func(id string) string {
		for _, mb := range members {
			if mb.ID == id && mb.Release != "" {
				return mb.Release
			}
		}
		return "unknown"
	}
	var who []string
	seen := map[string]bool{self: true}
	add := func(id string, decodable []string) {
		if !seen[id] && !slices.Contains(decodable, r.Preferred) {
			who = append(who, fmt.Sprintf("node %s (release %s, decodes %s)", id, release(id), strings.Join(decodable, ", ")))
		}
		seen[id] = true
	}
	for _, e := range sv.StorageVersions {
		add(e.NodeID, e.DecodableVersions)
	}
	for _, mb := range members {
		if d, ok := mb.Decodable[r.Key()]; ok && mb.Alive {
			add(mb.ID, d)
		}
	}
	if len(who) == 0 {
		return ""
	}
	return fmt.Sprintf("%s/%s is written, not the preferred %s/%s, because %s cannot decode %s; upgrade that node to a "+
		"release whose schema decodes %s, or remove it (keel remove-peer ID), and writes go back to %s",
		r.Group, effective, r.Group, r.Preferred, strings.Join(who, " and "), r.Preferred, r.Preferred, r.Preferred)
}

func memberKnown(members []Member, id string) bool {
	return slices.ContainsFunc(members, func(mb Member) bool { return mb.ID == id })
}

// cas writes value at key if the key's mod revision is still rev (0: absent). A nil
// value deletes. ok is false on a conflict.
func (m *Manager) cas(ctx context.Context, key string, rev int64, value []byte) (bool, error) {
	op := fsm.Op{Type: fsm.OpPut, Key: []byte(key), Value: value}
	if value == nil {
		op = fsm.Op{Type: fsm.OpDelete, Key: []byte(key)}
	}
	res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Compares: []fsm.Compare{{Key: []byte(key), Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: rev}},
		Success:  []fsm.Op{op},
	}})
	if err != nil {
		return false, err
	}
	if res.Err != nil {
		return false, res.Err
	}
	return res.Succeeded, nil
}
