package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/keel-kv/keel/versions"
)

// Schema at run time (the CRD case KEP-2339 leaves open):
//
//	PUT /v1/agent/schema[?file=NAME][&force=true]   body: the schema file (YAML)
//
// replaces this node's schema (keel schema apply FILE); SIGHUP re-reads -schema
// (Reload). 200 with the change; 400 BadSchema "NAME:LINE: problem"; 409
// SchemaChangeRefused when stored objects would be stranded. Either way nothing
// changed unless the answer is 200.

// errNoSchemaAtStart: the node was started without -schema. kv's table answers it as
// a refused schema change (it is one).
var errNoSchemaAtStart = asKind(versions.ErrSchemaChange, errors.New("agent: this node was started without "+
	"-schema: its resource API is off; restart it with -schema FILE to serve resources"))

// schema is the node's current schema, nil without one.
func (a *Agent) schema() *versions.Schema {
	if a.versions == nil {
		return nil
	}
	return a.versions.Schema()
}

// ApplySchema replaces the node's schema at run time (versions.Manager.ApplySchema
// says what is checked and when new resources are served), then tells the migrator
// and gossip. A refused schema changes nothing. Calls are serialized.
func (a *Agent) ApplySchema(ctx context.Context, s *versions.Schema, force bool) (*versions.SchemaChange, error) {
	if a.versions == nil {
		return nil, errNoSchemaAtStart
	}
	a.schemaMu.Lock()
	defer a.schemaMu.Unlock()
	ch, err := a.versions.ApplySchema(ctx, s, force)
	if err != nil {
		return ch, err
	}
	a.migrator.SetSchema(s)
	if a.gossip != nil {
		if err := a.gossip.setStorageVersions(ctx, gossipStorageVersions(s)); err != nil {
			a.log.Warn("announce the applied schema in gossip", "error", err)
		}
	}
	return ch, nil
}

// Reload reads the node's schema file (-schema) again and applies it without force:
// what SIGHUP does. A file that does not parse changes nothing; the error says
// FILE:LINE.
func (a *Agent) Reload(ctx context.Context) (*versions.SchemaChange, error) {
	if a.cfg.SchemaFile == "" {
		return nil, errNoSchemaAtStart
	}
	s, err := versions.LoadSchema(a.cfg.SchemaFile)
	if err != nil {
		return nil, err
	}
	return a.ApplySchema(ctx, s, false)
}

// handleApplySchema serves PUT /v1/agent/schema.
func (a *Agent) handleApplySchema(w http.ResponseWriter, r *http.Request) {
	name := filepath.Base(r.URL.Query().Get("file"))
	if name == "." || name == "/" {
		name = "schema"
	}
	force := r.URL.Query().Get("force") == "true"
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, versions.MaxSchemaSize+1))
	if err != nil {
		a.httpd.WriteError(w, r, bodyError(err))
		return
	}
	s, err := versions.ParseSchema(name, body) // versions.ErrBadSchema: 400 BadSchema
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	ch, err := a.ApplySchema(ctx, s, force) // versions.ErrSchemaChange: 409 SchemaChangeRefused
	if err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	a.log.Info("schema applied through the API", "file", name, "force", force)
	writeAgentJSON(w, http.StatusOK, ch)
}
