package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// errorAgent is a one-node cluster without gossip whose node has widgets-keymig.yaml's
// schema (a resource and a key migration) and answers 503/504 with Retry-After: 3.
func errorAgent(t *testing.T) *Agent {
	t.Helper()
	c := newTestClusterWith(t, 1, nil, func(cfg *Config) {
		*cfg = withSchema(*cfg, loadTestSchema(t, "widgets-keymig.yaml"))
		cfg.KV.RetryAfter = 3 * time.Second
	})
	a := c.agents[0]
	waitFor(t, "registered", 20*time.Second, func() error { return a.versions.Ready(context.Background()) })
	return a
}

// errorCall sends method path body to a and returns the status, the Retry-After
// header, the body decoded strictly as an api.Error and the body's JSON keys.
func errorCall(t *testing.T, a *Agent, method, path, body string) (int, string, api.Error, []string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+a.HTTPAddr()+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e api.Error
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Errorf("%s %s = %d %s: not an api.Error: %v", method, path, resp.StatusCode, raw, err)
	}
	var fields map[string]any
	_ = json.Unmarshal(raw, &fields)
	var keys []string
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e, keys
}

// TestAgentErrorsUseKVTable: every refusal of the agent's operator routes is kv's
// error answer (kv.WireError's table): the status and reason kv gives that kind of
// error, a body that is an api.Error with the same fields as a KV route's error.
//
//	route                                   refusal                   want
//	POST transfer-leader {"id":"nope"}      not a voter               400 BadRequest
//	POST transfer-leader "{"                bad body                  400 BadRequest
//	POST migrations apps/nope               not in the schema         404 NotFound
//	POST migrations "{"                     bad body                  400 BadRequest
//	DELETE migrations/apps/widgets          none running              409 NotRunning
//	PUT migrations/settings rate 0          bad settings              400 BadRequest
//	PUT migrations/settings without rate    bad body                  400 BadRequest
//	GET keymigrations/nope                  not in the schema         404 NotFound
//	POST keymigrations/.../rollback {}      no "to"                   400 BadRequest
//	POST keymigrations/.../advance to 99    not a phase               400 BadRequest
//	POST keymigrations/.../advance to 3     skips phases              409 PhaseRefused
//	PUT agent/schema "resources: ["         does not parse            400 BadSchema
//	POST agent/snapshot "junk"              not a snapshot            400 BadRequest
//
// Kills: a route that writes its own code or reason (400 "Unavailable" for an error
// that is no replication failure), or a body of its own shape.
func TestAgentErrorsUseKVTable(t *testing.T) {
	a := errorAgent(t)
	const km = api.PathKeyMigrations + "/widgets-v2-keys"
	tests := []struct {
		method, path, body string
		code               int
		reason             string
	}{
		{"POST", api.PathAgentTransferLeader, `{"id":"nope"}`, 400, api.ReasonBadRequest},
		{"POST", api.PathAgentTransferLeader, `{`, 400, api.ReasonBadRequest},
		{"POST", api.PathMigrations, `{"group":"apps","resource":"nope"}`, 404, api.ReasonNotFound},
		{"POST", api.PathMigrations, `{`, 400, api.ReasonBadRequest},
		{"DELETE", api.PathMigrations + "/apps/widgets", ``, 409, api.ReasonNotRunning},
		{"PUT", api.PathMigrationSettings, `{"auto":true,"rate":0}`, 400, api.ReasonBadRequest},
		{"PUT", api.PathMigrationSettings, `{"auto":true}`, 400, api.ReasonBadRequest},
		{"GET", api.PathKeyMigrations + "/nope", ``, 404, api.ReasonNotFound},
		{"POST", km + "/rollback", `{}`, 400, api.ReasonBadRequest},
		{"POST", km + "/advance", `{"to":99}`, 400, api.ReasonBadRequest},
		{"POST", km + "/advance", `{"to":3}`, 409, api.ReasonPhaseRefused},
		{"PUT", api.PathAgentSchema, `resources: [`, 400, api.ReasonBadSchema},
		{"POST", api.PathAgentSnapshot, `junk`, 400, api.ReasonBadRequest},
	}
	// The shape of a KV route's error: the fields every agent error must have too.
	code, _, _, kvKeys := errorCall(t, a, "GET", api.PathKV+"missing", "")
	if code != http.StatusNotFound {
		t.Fatalf("GET /v1/kv/missing = %d, want 404", code)
	}
	for i, tt := range tests {
		code, _, e, keys := errorCall(t, a, tt.method, tt.path, tt.body)
		if code != tt.code || e.Code != tt.code || e.Reason != tt.reason || e.Message == "" {
			t.Errorf("#%d: %s %s = %d %+v, want %d %s", i, tt.method, tt.path, code, e, tt.code, tt.reason)
		}
		if !slices.Equal(keys, kvKeys) {
			t.Errorf("#%d: %s %s body fields %v, want a KV error's %v", i, tt.method, tt.path, keys, kvKeys)
		}
	}
}

// TestAgentRaftErrorsAre503: once the node's raft is shut down, the agent's routes that
// read through raft answer as kv does: 503 ShuttingDown with the configured
// Retry-After (3, not a value of the agent's own).
//
// Kills: a raft error answered with a code, reason or Retry-After of the agent's own.
func TestAgentRaftErrorsAre503(t *testing.T) {
	a := errorAgent(t)
	// One answered request first: kv's ACL layer has then confirmed its state at the
	// leader and asks raft no more, so the refusal is the route's own.
	if code, _, _, _ := errorCall(t, a, "GET", api.PathKV+"missing", ""); code != http.StatusNotFound {
		t.Fatalf("GET /v1/kv/missing = %d, want 404", code)
	}
	if err := a.node.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, path := range []string{api.PathMigrations, api.PathMigrationSettings, api.PathKeyMigrations,
		api.PathKeyMigrations + "/widgets-v2-keys"} {
		code, retry, e, _ := errorCall(t, a, "GET", path, "")
		if code != http.StatusServiceUnavailable || e.Reason != api.ReasonShuttingDown || retry != "3" {
			t.Errorf("#%d: GET %s after raft shutdown = %d %+v Retry-After %q, want 503 %s Retry-After 3",
				i, path, code, e, retry, api.ReasonShuttingDown)
		}
	}
}
