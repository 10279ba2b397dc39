package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/keel-kv/keel/kv/api"
)

// KeyMigrations returns every key migration the answering node's schema declares, with
// its phase, work and members (GET /v1/keymigrations).
func (c *Client) KeyMigrations(ctx context.Context) ([]api.KeyMigrationStatus, error) {
	var out []api.KeyMigrationStatus
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathKeyMigrations}, &out)
	return out, err
}

// KeyMigration returns key migration name's status; a 404 (api.ReasonNotFound) when the
// answering node's schema does not declare it.
func (c *Client) KeyMigration(ctx context.Context, name string) (*api.KeyMigrationStatus, error) {
	var out api.KeyMigrationStatus
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathKeyMigrations + "/" + url.PathEscape(name)}, &out)
	return &out, err
}

// AdvanceKeyMigration moves key migration name one phase forward (to, when set, must
// be the next phase); by names who asks. A refusal is a 409 with reason
// api.ReasonPhaseRefused whose message says why; nothing changed.
func (c *Client) AdvanceKeyMigration(ctx context.Context, name string, to *int, by string) (*api.KeyPhaseRecord, error) {
	return c.keyTransition(ctx, name, "advance", api.KeyMigrationRequest{To: to, By: by})
}

// RollbackKeyMigration moves key migration name back to phase to (see the RFD 126
// rules in docs/api.md); by names who asks. A refusal is a 409 PhaseRefused.
func (c *Client) RollbackKeyMigration(ctx context.Context, name string, to int, by string) (*api.KeyPhaseRecord, error) {
	return c.keyTransition(ctx, name, "rollback", api.KeyMigrationRequest{To: &to, By: by})
}

func (c *Client) keyTransition(ctx context.Context, name, step string, req api.KeyMigrationRequest) (*api.KeyPhaseRecord, error) {
	body, _ := json.Marshal(req)
	var out api.KeyPhaseRecord
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathKeyMigrations + "/" + url.PathEscape(name) + "/" + step,
		body: body, ctype: "application/json", write: true}, &out)
	return &out, err
}
