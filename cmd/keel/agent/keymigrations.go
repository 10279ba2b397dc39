package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/versions"
)

// Key-migration routes (wire types in kv/api/keymigrations.go). Any node answers; a
// transition is a compare-and-swap on the phase record through Raft, decided on this
// node's linearizable view and gossip's view of the members.
//
//	GET  /v1/keymigrations                  every key migration this node's schema declares
//	GET  /v1/keymigrations/{name}           one
//	POST /v1/keymigrations/{name}/advance   {"to":N,"by":WHO}: one phase forward
//	POST /v1/keymigrations/{name}/rollback  {"to":N,"by":WHO}: back to phase N
func (a *Agent) registerKeyMigrationRoutes() {
	a.httpd.Handle("GET "+api.PathKeyMigrations, http.HandlerFunc(a.handleKeyMigrations))
	a.httpd.Handle("GET "+api.PathKeyMigrations+"/{name}", http.HandlerFunc(a.handleKeyMigration))
	a.httpd.Handle("POST "+api.PathKeyMigrations+"/{name}/advance", http.HandlerFunc(a.handleKeyTransition))
	a.httpd.Handle("POST "+api.PathKeyMigrations+"/{name}/rollback", http.HandlerFunc(a.handleKeyTransition))
}

// keyMembers is every member as gossip shows it (left members aside). Without gossip
// a one-member cluster's only member is this node, whose support and phase it knows
// itself; a larger cluster without gossip gets nil: no member's support is known and
// every advance is refused (the message says to turn gossip on).
func (a *Agent) keyMembers() []migrate.KeyMember {
	if a.gossip == nil {
		return a.soleKeyMember()
	}
	out := []migrate.KeyMember{}
	for _, m := range a.gossip.ml.Members() {
		if m.Status == membership.StatusLeft {
			continue
		}
		out = append(out, migrate.KeyMember{ID: m.ID(), Release: m.Meta.Release, Known: true, Alive: !m.Gone(),
			Phases: m.Meta.KeyMigrations})
	}
	return out
}

// soleKeyMember is this node as the only member, when the Raft configuration holds
// no other server (voter or not): `make run`'s one node without gossip.
func (a *Agent) soleKeyMember() []migrate.KeyMember {
	ms := a.node.Status().Members
	if len(ms) != 1 || ms[0].ID != a.cfg.NodeID {
		return nil
	}
	return []migrate.KeyMember{{ID: a.cfg.NodeID, Release: buildinfo.Version(), Known: true, Alive: true,
		Phases: a.localKeyPhases()}}
}

// keyMigrationStatus builds the status of k from view.
func (a *Agent) keyMigrationStatus(view *fsm.View, k *versions.KeyMigration) (*api.KeyMigrationStatus, error) {
	rec, err := versions.ReadKeyPhase(view, k.Name)
	if err != nil {
		return nil, err
	}
	work, err := versions.ReadKeyWork(view, k.Name)
	if err != nil {
		return nil, err
	}
	st := &api.KeyMigrationStatus{Name: k.Name, Resource: k.Resource, From: k.From, To: k.To, Phase: rec.Phase,
		RollbackTo: rec.RollbackTo, Last: rec.Last, Revision: view.Revision()}
	if work != nil && work.PhaseRev == rec.Revision {
		st.Work = work
	}
	st.OldKeys, st.NewKeys = migrate.CountKeys(view, k)
	members := a.keyMembers()
	st.Nodes = migrate.MemberStatus(k.Name, rec.Phase, members)
	st.NextBlocked = migrate.AdvanceBlocked(view, k, rec, members, rec.Phase+1)
	return st, nil
}

func (a *Agent) handleKeyMigrations(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	view, err := a.node.View(ctx, fsm.Linearizable)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	out := []*api.KeyMigrationStatus{}
	for _, k := range a.schema().KeyMigrations() {
		st, err := a.keyMigrationStatus(view, k)
		if err != nil {
			a.httpd.WriteError(w, r, err)
			return
		}
		out = append(out, st)
	}
	writeAgentJSON(w, http.StatusOK, out)
}

// lookupKeyMigration is the key migration name of this node's schema: kv.ErrNoRoute
// (404) for one it does not declare.
func (a *Agent) lookupKeyMigration(name string) (*versions.KeyMigration, error) {
	k, _ := a.schema().KeyMigrationNamed(name)
	if k == nil {
		return nil, fmt.Errorf("%w: no key migration %q in this node's schema "+
			"(declare it under a resource's keyMigrations)", kv.ErrNoRoute, name)
	}
	return k, nil
}

func (a *Agent) handleKeyMigration(w http.ResponseWriter, r *http.Request) {
	k, err := a.lookupKeyMigration(r.PathValue("name"))
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	view, err := a.node.View(ctx, fsm.Linearizable)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	st, err := a.keyMigrationStatus(view, k)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, st)
}

// handleKeyTransition serves advance and rollback: 200 with the new phase record; 400
// for a bad body (rollback without "to"); 404 for an unknown migration; 409
// PhaseRefused with the reason. Every transition is logged with who asked.
func (a *Agent) handleKeyTransition(w http.ResponseWriter, r *http.Request) {
	k, err := a.lookupKeyMigration(r.PathValue("name"))
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	var req api.KeyMigrationRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		a.httpd.WriteError(w, r, bodyError(err))
		return
	}
	rollback := r.URL.Path == api.PathKeyMigrations+"/"+k.Name+"/rollback"
	if req.To != nil && (*req.To < 0 || *req.To > api.KeyPhaseMax) {
		a.httpd.WriteError(w, r, fmt.Errorf("%w: to %d is not a phase (0 to %d)", kv.ErrInvalidBody, *req.To, api.KeyPhaseMax))
		return
	}
	if rollback && req.To == nil {
		a.httpd.WriteError(w, r, fmt.Errorf(`%w: rollback needs "to", the phase to go back to`, kv.ErrInvalidBody))
		return
	}
	if req.By == "" {
		req.By = "anonymous"
	}
	t := migrate.Transition{By: req.By, Remote: r.RemoteAddr}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var rec *api.KeyPhaseRecord
	if rollback {
		rec, err = migrate.Rollback(ctx, a.node, k, *req.To, t)
	} else {
		rec, err = migrate.Advance(ctx, a.node, k, req.To, a.keyMembers(), t)
	}
	kind := map[bool]string{true: "rollback", false: "advance"}[rollback]
	if errors.Is(err, migrate.ErrPhaseRefused) {
		a.log.Info("key migration step refused", "migration", k.Name, "step", kind, "by", t.By, "remote", t.Remote,
			"reason", err.Error())
	}
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	a.log.Info("key migration phase changed", "migration", k.Name, "step", kind, "from", rec.Last.From,
		"to", rec.Phase, "rollback_to", rec.RollbackTo, "by", t.By, "remote", t.Remote)
	writeAgentJSON(w, http.StatusOK, rec)
}

// localKeyPhases is the phase this node applies for each key migration of its schema,
// from its own state machine.
func (a *Agent) localKeyPhases() map[string]int {
	view := a.store.View()
	out := map[string]int{}
	for _, k := range a.schema().KeyMigrations() {
		rec, err := versions.ReadKeyPhase(view, k.Name)
		if err != nil {
			continue
		}
		out[k.Name] = rec.Phase
	}
	return out
}

// announceKeyPhasesLoop keeps this node's gossip metadata announcing the phase it
// applies for each key migration it supports (what advance requires of every member).
func (a *Agent) announceKeyPhasesLoop(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		phases := a.localKeyPhases()
		g := a.gossip
		g.metaMu.Lock()
		if !maps.Equal(phases, g.meta.KeyMigrations) && (len(phases) > 0 || len(g.meta.KeyMigrations) > 0) {
			g.meta.KeyMigrations = phases
			if err := g.ml.UpdateMeta(ctx, g.meta); err != nil && ctx.Err() == nil {
				a.log.Warn("announce key migration phases", "error", err)
			}
		}
		g.metaMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// keyMigrationsReady is the /readyz?verbose line of key migrations: always passing,
// with each migration's phase and work.
func (a *Agent) keyMigrationsReady(context.Context) error {
	view := a.store.View()
	var note string
	for _, k := range a.schema().KeyMigrations() {
		rec, err := versions.ReadKeyPhase(view, k.Name)
		if err != nil {
			return err
		}
		if note != "" {
			note += "; "
		}
		note += fmt.Sprintf("%s phase %d", k.Name, rec.Phase)
		if rec.RollbackTo != nil {
			note += fmt.Sprintf(" (rolling back to %d)", *rec.RollbackTo)
		}
		if w, _ := versions.ReadKeyWork(view, k.Name); w != nil && w.PhaseRev == rec.Revision {
			note += fmt.Sprintf(" (%s %s: %d/%d scanned, %d left)", w.Kind, w.State, w.Scanned, w.Total, w.Left)
		}
	}
	if note == "" {
		return nil
	}
	return kv.ReadyNote(note)
}

// keyMigrationsCollector exports each declared key migration's phase, range sizes and
// work at each scrape, from the local state machine.
type keyMigrationsCollector struct{ a *Agent }

var (
	descKeyPhase = prometheus.NewDesc("keel_keymigration_phase",
		"Phase (0-5) of the key migration, as this node applies it.", []string{"migration"}, nil)
	descKeyRollback = prometheus.NewDesc("keel_keymigration_rolling_back",
		"1 while a rollback from phase 4 copies the new keys back.", []string{"migration"}, nil)
	descKeyRange = prometheus.NewDesc("keel_keymigration_keys",
		"Keys in the key migration's old and new ranges.", []string{"migration", "range"}, nil)
	descKeyWork = prometheus.NewDesc("keel_keymigration_work_keys",
		"Keys of the key migration's background work (copy, delete, reverse): scanned, written, skipped, "+
			"left (exact at the end of a pass), total.", []string{"migration", "work", "count"}, nil)
	descKeyBlocked = prometheus.NewDesc("keel_keymigration_advance_blocked",
		"1 while the key migration cannot advance to its next phase (GET /v1/keymigrations says why); "+
			"absent at the last phase.", []string{"migration"}, nil)
	descKeyETA = prometheus.NewDesc("keel_keymigration_work_eta_seconds",
		"Time the running work needs at its recent rate.", []string{"migration", "work"}, nil)
)

func (c keyMigrationsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeyPhase, descKeyRollback, descKeyRange, descKeyWork, descKeyETA, descKeyBlocked} {
		ch <- d
	}
}

func (c keyMigrationsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.a.versionsMetrics.Load() == nil {
		return
	}
	view := c.a.store.View()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	var members []migrate.KeyMember // asked once, for the first migration short of its last phase
	for _, k := range c.a.versionsMetrics.Load().Schema().KeyMigrations() {
		rec, err := versions.ReadKeyPhase(view, k.Name)
		if err != nil {
			continue
		}
		g(descKeyPhase, float64(rec.Phase), k.Name)
		if rec.Phase < api.KeyPhaseMax {
			if members == nil {
				members = c.a.keyMembers()
			}
			blocked := 0.0
			if migrate.AdvanceBlocked(view, k, rec, members, rec.Phase+1) != "" {
				blocked = 1
			}
			g(descKeyBlocked, blocked, k.Name)
		}
		rb := 0.0
		if rec.RollbackTo != nil {
			rb = 1
		}
		g(descKeyRollback, rb, k.Name)
		old, nw := migrate.CountKeys(view, k)
		g(descKeyRange, float64(old), k.Name, "old")
		g(descKeyRange, float64(nw), k.Name, "new")
		if w, _ := versions.ReadKeyWork(view, k.Name); w != nil {
			for count, v := range map[string]int64{"scanned": w.Scanned, "written": w.Written, "skipped": w.Skipped,
				"left": w.Left, "total": w.Total} {
				g(descKeyWork, float64(v), k.Name, w.Kind, count)
			}
			g(descKeyETA, w.ETASeconds, k.Name, w.Kind)
		}
	}
}
