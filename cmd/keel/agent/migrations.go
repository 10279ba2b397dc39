package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/migrate"
)

// Migration routes (wire types in kv/api/migrations.go). Any node answers; writes go
// through Raft, and the leader's migrator acts on them at its next round.
//
//	GET    /v1/migrations                     every migration record, current and finished
//	POST   /v1/migrations                     {"group","resource"}: start or resume one now
//	DELETE /v1/migrations/{group}/{resource}  abort it, keeping its checkpoint
//	GET    /v1/migrations/settings            the cluster-wide settings {"auto","rate"}
//	PUT    /v1/migrations/settings            replace them
func (a *Agent) registerMigrationRoutes() {
	a.httpd.Handle("GET "+api.PathMigrations, http.HandlerFunc(a.handleMigrations))
	a.httpd.Handle("POST "+api.PathMigrations, http.HandlerFunc(a.handleStartMigration))
	a.httpd.Handle("DELETE "+api.PathMigrations+"/{group}/{resource}", http.HandlerFunc(a.handleAbortMigration))
	a.httpd.Handle("GET "+api.PathMigrationSettings, http.HandlerFunc(a.handleMigrationSettings))
	a.httpd.Handle("PUT "+api.PathMigrationSettings, http.HandlerFunc(a.handlePutMigrationSettings))
}

// handleMigrations serves GET /v1/migrations: every stored migration record (read
// linearizably), plus a Waiting line for each resource of this node's schema that has
// none yet.
func (a *Agent) handleMigrations(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	view, err := a.node.View(ctx, fsm.Linearizable)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	out, err := migrate.ListStatuses(view)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	settings, err := a.migrationSettings(ctx)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	if s := a.schema(); s != nil {
		for _, res := range s.Resources {
			if slices.ContainsFunc(out, func(s *migrate.Status) bool { return s.Resource == res.Key() }) {
				continue
			}
			st := &migrate.Status{Resource: res.Key(), State: migrate.StateWaiting, Message: "not started"}
			if !settings.Auto {
				st.Message = "automatic migrations are off: POST /v1/migrations (keel migrate start) starts one"
			}
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(x, y *migrate.Status) int { return strings.Compare(x.Resource, y.Resource) })
	writeAgentJSON(w, http.StatusOK, out)
}

// handleStartMigration serves POST /v1/migrations: 202 with the record once the
// request is stored; 404 for a resource outside this node's schema; 409
// NoCommonVersion while the members do not all write one version.
func (a *Agent) handleStartMigration(w http.ResponseWriter, r *http.Request) {
	var req api.MigrationRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		a.httpd.WriteError(w, r, bodyError(err))
		return
	}
	key := req.Group + "/" + req.Resource
	if s := a.schema(); s == nil || s.LookupKey(key) == nil {
		a.httpd.WriteError(w, r, fmt.Errorf("%w: resource %s is not in this node's schema", kv.ErrNoRoute, key))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	st, err := migrate.Request(ctx, a.node, key)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusAccepted, st)
}

// handleAbortMigration serves DELETE /v1/migrations/{group}/{resource}: 200 with the
// Aborted record, 409 NotRunning when none runs.
func (a *Agent) handleAbortMigration(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	st, err := migrate.Abort(ctx, a.node, r.PathValue("group")+"/"+r.PathValue("resource"))
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, st)
}

func (a *Agent) handleMigrationSettings(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	s, err := a.migrationSettings(ctx)
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, s)
}

// handlePutMigrationSettings serves PUT /v1/migrations/settings: both fields are
// required; a rate of 0 (or below -1) is a 400.
func (a *Agent) handlePutMigrationSettings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Auto *bool `json:"auto"`
		Rate *int  `json:"rate"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		a.httpd.WriteError(w, r, bodyError(err))
		return
	}
	if req.Auto == nil || req.Rate == nil {
		a.httpd.WriteError(w, r, fmt.Errorf(`%w: want both "auto" and "rate"`, kv.ErrInvalidBody))
		return
	}
	s := migrate.Settings{Auto: *req.Auto, Rate: *req.Rate}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := migrate.WriteSettings(ctx, a.node, s); err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, s)
}

// migrationSettings are the stored settings, or, before any are stored, those this
// node's flags imply (what it would store as leader).
func (a *Agent) migrationSettings(ctx context.Context) (migrate.Settings, error) {
	view, err := a.node.View(ctx, fsm.Linearizable)
	if err != nil {
		return migrate.Settings{}, err
	}
	s, err := migrate.ReadSettings(view)
	if err != nil || s != nil {
		if s == nil {
			return migrate.Settings{}, err
		}
		return *s, err
	}
	if a.migrator != nil {
		return a.migrator.DefaultSettings(), nil
	}
	return migrate.Settings{Auto: !a.cfg.NoMigrate, Rate: 500}, nil
}

// migrationsCollector exports each migration record of the local state machine at
// each scrape (every node reports the same replicated records).
type migrationsCollector struct{ a *Agent }

var (
	descMigState = prometheus.NewDesc("keel_migration_state",
		"1 for the state the resource's storage-version migration is in.", []string{"resource", "state"}, nil)
	descMigObjects = prometheus.NewDesc("keel_migration_objects",
		"Objects of the resource's migration: scanned, rewritten, skipped (all passes), remaining (outside the target "+
			"version), total (when the pass began), poison (cannot be converted).", []string{"resource", "count"}, nil)
	descMigProgress = prometheus.NewDesc("keel_migration_pass_progress_ratio",
		"Share of the resource's objects the current pass has scanned.", []string{"resource"}, nil)
	descMigRate = prometheus.NewDesc("keel_migration_rate_objects_per_second",
		"Recent scan rate of the running migration.", []string{"resource"}, nil)
	descMigETA = prometheus.NewDesc("keel_migration_eta_seconds",
		"Time the running pass needs at the recent rate.", []string{"resource"}, nil)
	descMigAuto = prometheus.NewDesc("keel_migration_auto",
		"1 when the cluster-wide setting starts migrations automatically.", nil, nil)
	descMigRateLimit = prometheus.NewDesc("keel_migration_rate_limit",
		"Cluster-wide bound on rewrites per second (-1: unlimited).", nil, nil)
)

func (c migrationsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMigState, descMigObjects, descMigProgress, descMigRate, descMigETA,
		descMigAuto, descMigRateLimit} {
		ch <- d
	}
}

func (c migrationsCollector) Collect(ch chan<- prometheus.Metric) {
	view := c.a.store.View()
	if s, err := migrate.ReadSettings(view); err == nil && s != nil {
		auto := 0.0
		if s.Auto {
			auto = 1
		}
		ch <- prometheus.MustNewConstMetric(descMigAuto, prometheus.GaugeValue, auto)
		ch <- prometheus.MustNewConstMetric(descMigRateLimit, prometheus.GaugeValue, float64(s.Rate))
	}
	sts, err := migrate.ListStatuses(view)
	if err != nil {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, st := range sts {
		res := st.Resource
		g(descMigState, 1, res, string(st.State))
		for count, v := range map[string]int64{"scanned": st.Scanned, "rewritten": st.Migrated, "skipped": st.Skipped,
			"remaining": st.RemainingTotal(), "total": st.Total, "poison": int64(len(st.Poison))} {
			g(descMigObjects, float64(v), res, count)
		}
		if st.Total > 0 {
			g(descMigProgress, min(float64(st.PassScanned)/float64(st.Total), 1), res)
		}
		g(descMigRate, st.ObjectsPerSecond, res)
		g(descMigETA, st.ETASeconds, res)
	}
}
