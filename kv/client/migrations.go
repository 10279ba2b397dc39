package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/keel-kv/keel/kv/api"
)

// Migrations returns every storage-version migration the cluster records, current and
// finished, ordered by resource (GET /v1/migrations).
func (c *Client) Migrations(ctx context.Context) ([]api.MigrationStatus, error) {
	var out []api.MigrationStatus
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathMigrations}, &out)
	return out, err
}

// StartMigration asks the leader to start (or resume) the migration of resource
// ("group/name") now, even when automatic migrations are off. A 409 with reason
// api.ReasonNoCommonVersion means the members do not all write one version yet.
func (c *Client) StartMigration(ctx context.Context, resource string) (*api.MigrationStatus, error) {
	group, name, _ := strings.Cut(resource, "/")
	body, _ := json.Marshal(api.MigrationRequest{Group: group, Resource: name})
	var out api.MigrationStatus
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathMigrations, body: body,
		ctype: "application/json", write: true}, &out)
	return &out, err
}

// AbortMigration aborts the running migration of resource ("group/name"), keeping its
// checkpoint (StartMigration resumes it). A 409 with reason api.ReasonNotRunning means
// none runs.
func (c *Client) AbortMigration(ctx context.Context, resource string) (*api.MigrationStatus, error) {
	group, name, _ := strings.Cut(resource, "/")
	var out api.MigrationStatus
	err := c.do(ctx, call{method: http.MethodDelete,
		path: api.PathMigrations + "/" + url.PathEscape(group) + "/" + url.PathEscape(name), write: true}, &out)
	return &out, err
}

// MigrationSettings returns the cluster-wide migrator settings.
func (c *Client) MigrationSettings(ctx context.Context) (api.MigrationSettings, error) {
	var out api.MigrationSettings
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathMigrationSettings}, &out)
	return out, err
}

// SetMigrationSettings replaces the cluster-wide migrator settings; the leader applies
// them at its next step.
func (c *Client) SetMigrationSettings(ctx context.Context, s api.MigrationSettings) error {
	body, _ := json.Marshal(s)
	return c.do(ctx, call{method: http.MethodPut, path: api.PathMigrationSettings, body: body,
		ctype: "application/json", write: true}, nil)
}
