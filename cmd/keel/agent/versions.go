package agent

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	hraft "github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/resources"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// startVersions starts the storage-version manager when the node has a schema: the
// resource API, the write filter and the StorageVersion / StorageState loops. It runs
// after gossip has started, so the first registration already sees the membership.
func (a *Agent) startVersions(ctx context.Context) error {
	if a.cfg.Schema == nil {
		return nil
	}
	vcfg := a.cfg.Versions
	vcfg.NodeID = a.cfg.NodeID
	vcfg.Incarnation = a.incarnation
	vcfg.Schema = a.cfg.Schema
	vcfg.Store = a.node
	vcfg.Logger = a.log.Named("versions")
	if a.gossip != nil {
		vcfg.Members = a.versionMembers
		joinAddrs := len(a.cfg.Gossip.Join) > 0
		vcfg.Joined = func() bool { return !joinAddrs || a.gossip.ml.Joined() }
	} else {
		vcfg.Members = a.raftMembers
	}
	m, err := versions.New(vcfg)
	if err != nil {
		return err
	}
	a.versions = m
	a.versionsMetrics.Store(m)
	resources.Attach(a.server, m)
	a.server.AddReadyCheck("storage-versions", m.Ready)
	a.server.AddReadyCheck("key-migrations", a.keyMigrationsReady)
	m.Open(ctx)
	mcfg := a.cfg.Migrate
	mcfg.Schema, mcfg.Store, mcfg.Logger = a.cfg.Schema, a.node, a.log.Named("migrate")
	mcfg.NoAuto = mcfg.NoAuto || a.cfg.NoMigrate
	mcfg.KeyMembers = a.keyMembers
	mcfg.Finished = func(ctx context.Context, _ string) {
		if err := m.Heartbeat(ctx); err != nil {
			a.log.Warn("storage state after a migration", "error", err)
		}
	}
	mg, err := migrate.New(mcfg)
	if err != nil {
		return err
	}
	a.migrator = mg
	mg.Start()
	return nil
}

// versionMembers adapts gossip membership for the manager.
func (a *Agent) versionMembers() []versions.Member {
	ms := a.gossip.ml.Members()
	out := make([]versions.Member, 0, len(ms))
	for _, m := range ms {
		vm := versions.Member{ID: m.ID(), Incarnation: m.Meta.Incarnation, Alive: !m.Gone(),
			Left: m.Status == membership.StatusLeft, Release: m.Meta.Release}
		if m.Gone() {
			vm.Since = m.LastChange
		}
		if len(m.Meta.StorageVersions) > 0 {
			vm.Decodable = make(map[string][]string, len(m.Meta.StorageVersions))
			for res, sv := range m.Meta.StorageVersions {
				vm.Decodable[res] = sv.DecodableVersions
			}
		}
		out = append(out, vm)
	}
	return out
}

// raftMembers is the membership of a cluster without gossip: the Raft configuration,
// every server taken as alive.
func (a *Agent) raftMembers() []versions.Member {
	var out []versions.Member
	for _, s := range a.node.Status().Members {
		out = append(out, versions.Member{ID: s.ID, Alive: true})
	}
	if !slices.ContainsFunc(out, func(m versions.Member) bool { return m.ID == a.cfg.NodeID }) {
		out = append(out, versions.Member{ID: a.cfg.NodeID, Incarnation: a.incarnation, Alive: true})
	}
	return out
}

// gossipStorageVersions is what this node announces in gossip metadata: per resource
// of its schema, the encodings it prefers, decodes and serves.
func gossipStorageVersions(s *versions.Schema) map[string]membership.StorageVersion {
	if s == nil {
		return nil
	}
	out := make(map[string]membership.StorageVersion, len(s.Resources))
	for _, r := range s.Resources {
		out[r.Key()] = membership.StorageVersion{EncodingVersion: r.Preferred,
			DecodableVersions: r.Decodable(), ServedVersions: r.Served()}
	}
	return out
}

// commandFormatLimit is the newest command format every voter applies, from gossip:
// a voter whose metadata is unknown counts as the oldest format.
func commandFormatLimit(voters []string, members []membership.Member) byte {
	limit := fsm.MaxCommandFormat
	for _, id := range voters {
		f := fsm.MinCommandFormat
		for _, m := range members {
			if m.ID() == id && m.Meta.MaxCommandFormat > 0 {
				f = byte(min(m.Meta.MaxCommandFormat, int(fsm.MaxCommandFormat)))
			}
		}
		limit = min(limit, f)
	}
	return limit
}

// updateFormatLimit applies commandFormatLimit to the raft node.
func (g *gossip) updateFormatLimit(members []membership.Member) {
	var voters []string
	for _, s := range g.a.node.Status().Members {
		if s.Suffrage == hraft.Voter {
			voters = append(voters, s.ID)
		}
	}
	if len(voters) == 0 {
		return
	}
	if f := commandFormatLimit(voters, members); f != g.a.node.CommandFormatLimit() {
		g.a.log.Info("command format limit", "format", f, "voters", len(voters))
		g.a.node.SetCommandFormatLimit(f)
	}
}

var _ versions.Store = (*raft.Node)(nil)

// handleVersions serves GET /v1/versions: the storage-version report of every resource.
func (a *Agent) handleVersions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rep, err := versions.BuildReport(ctx, a.node, a.versions, a.cfg.NodeID)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, rep)
}

// versionsCollector exports the storage-version state at each scrape: stored objects
// per resource and version (exact, from the state machine's counts), whether this node
// has registered, the version it writes, and lost registration races.
type versionsCollector struct{ a *Agent }

var (
	descObjects = prometheus.NewDesc("keel_storage_objects", "Stored objects per resource and encoding version.",
		[]string{"resource", "version"}, nil)
	descRegistered = prometheus.NewDesc("keel_storage_version_registered",
		"1 once this node has registered its storage versions for the resource.", []string{"resource"}, nil)
	descWriting = prometheus.NewDesc("keel_storage_version_writing",
		"1 for the version this node writes the resource in; absent while it refuses writes.", []string{"resource", "version"}, nil)
	descHeldBack = prometheus.NewDesc("keel_storage_version_held_back",
		"1 while a member that cannot decode the preferred version keeps this node's writes of the resource in an "+
			"older one (GET /v1/versions says which member and what to do).", []string{"resource"}, nil)
	descConflicts = prometheus.NewDesc("keel_storage_version_registration_conflicts_total",
		"StorageVersion compare-and-swaps this node lost to another node's update (each retried).", nil, nil)
)

func (c versionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descObjects
	ch <- descRegistered
	ch <- descWriting
	ch <- descConflicts
	ch <- descHeldBack
}

func (c versionsCollector) Collect(ch chan<- prometheus.Metric) {
	for tag, n := range c.a.store.View().Encodings() {
		i := strings.LastIndexByte(tag, '/')
		if i <= 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(n), tag[:i], tag[i+1:])
	}
	m := c.a.versionsMetrics.Load()
	if m == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.CounterValue, float64(m.Conflicts()))
	for _, r := range m.Schema().Resources {
		enc, err := m.WriteEncoding(r.Key())
		registered := 1.0
		if errors.Is(err, versions.ErrNotRegistered) {
			registered = 0
		}
		ch <- prometheus.MustNewConstMetric(descRegistered, prometheus.GaugeValue, registered, r.Key())
		held := 0.0
		if m.HeldBack(r.Key()) != "" {
			held = 1
		}
		ch <- prometheus.MustNewConstMetric(descHeldBack, prometheus.GaugeValue, held, r.Key())
		if err == nil {
			ch <- prometheus.MustNewConstMetric(descWriting, prometheus.GaugeValue, 1, r.Key(), enc)
		}
	}
}
