package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Members returns the cluster's servers as the answering node sees them: the raft
// configuration joined with gossip (GET /v1/agent/members).
func (c *Client) Members(ctx context.Context) ([]api.MemberInfo, error) {
	var out api.MembersResponse
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathAgentMembers}, &out)
	return out.Members, err
}

// RemovePeer removes the server id from the raft configuration (DELETE
// /v1/agent/peers/{id}); it stops voting at once.
func (c *Client) RemovePeer(ctx context.Context, id string) error {
	return c.do(ctx, call{method: http.MethodDelete, path: api.PathAgentPeers + url.PathEscape(id), write: true}, nil)
}

// TransferLeader hands leadership to the voter id, or to the most up-to-date voter
// when id is empty (POST /v1/agent/transfer-leader).
func (c *Client) TransferLeader(ctx context.Context, id string) error {
	return c.postJSON(ctx, api.PathAgentTransferLeader, api.TransferLeaderRequest{ID: id}, nil, true)
}

// Leave makes the first node that answers leave the cluster gracefully and stop
// (POST /v1/agent/leave). It returns the ID of the node that left.
func (c *Client) Leave(ctx context.Context) (string, error) {
	var out api.LeaveResponse
	err := c.do(ctx, call{method: http.MethodPost, path: api.PathAgentLeave, write: true}, &out)
	return out.NodeID, err
}

// Versions returns the storage-version report of every resource (GET /v1/versions) as
// the JSON the node sent: its type, versions.Report, belongs to the server side, which
// this package does not import.
func (c *Client) Versions(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, call{method: http.MethodGet, path: api.PathVersions}, &out)
	return out, err
}

// Metrics returns the Prometheus text exposition of the first node that answers
// (GET /metrics).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var out []byte
	err := c.retry(ctx, false, func(base string) (time.Duration, error) {
		resp, ra, err := c.send(ctx, base, http.MethodGet, api.PathMetrics, nil, "")
		if err != nil {
			return ra, err
		}
		defer resp.Body.Close()
		out, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		if err != nil {
			return 0, fmt.Errorf("client: GET %s: %w: %w", api.PathMetrics, errBrokenResponse, err)
		}
		return 0, nil
	})
	return out, err
}

// Snapshot asks the first node that answers for a snapshot of the state machine
// reflecting every write acknowledged before the call (GET /v1/agent/snapshot). The
// caller reads the returned stream to its end and closes it; an error while reading
// means the snapshot is incomplete.
func (c *Client) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	var body io.ReadCloser
	err := c.retry(ctx, false, func(base string) (time.Duration, error) {
		resp, ra, err := c.send(ctx, base, http.MethodGet, api.PathAgentSnapshot, nil, "")
		if err != nil {
			return ra, err
		}
		body = resp.Body
		return 0, nil
	})
	return body, err
}

// RestoreSnapshot replaces the whole cluster's state with the snapshot in r (POST
// /v1/agent/snapshot). Only the leader accepts it: followers answer 503 and the client
// moves on to the next node, rewinding r. A 400 means the file is damaged, not a keel
// snapshot, or another cluster's (see RestoreOptions.ForceForeign); nothing changed.
func (c *Client) RestoreSnapshot(ctx context.Context, r io.ReadSeeker) error {
	return c.RestoreSnapshotWith(ctx, r, RestoreOptions{})
}

// RestoreOptions tune RestoreSnapshotWith.
type RestoreOptions struct {
	// ForceForeign restores a snapshot this cluster cannot authenticate: saved by
	// another cluster, or before saved files carried a MAC (refused with 400
	// otherwise). Its MAC is not checked; its data replaces this cluster's.
	ForceForeign bool
}

// RestoreSnapshotWith is RestoreSnapshot with options.
func (c *Client) RestoreSnapshotWith(ctx context.Context, r io.ReadSeeker, o RestoreOptions) error {
	path := api.PathAgentSnapshot
	if o.ForceForeign {
		path += "?force_foreign=true"
	}
	return c.retry(ctx, true, func(base string) (time.Duration, error) {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return 0, fmt.Errorf("client: rewind snapshot: %w", err)
		}
		resp, ra, err := c.send(ctx, base, http.MethodPost, path, io.NopCloser(r), api.ContentTypeSnapshot)
		if err != nil {
			return ra, err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return 0, nil
	})
}

// ImportEtcdSnapshot replaces the whole cluster's data with r, a state machine stream
// made from an etcd snapshot (package etcdsnap: Data.WriteKeel). The cluster checks
// every key against its own rules first: what it cannot hold is a 400 listing it, and
// nothing changes, unless skipUnholdable, which leaves those keys and leases out. The
// cluster keeps its own ID, secret and records (ACL, storage versions).
func (c *Client) ImportEtcdSnapshot(ctx context.Context, r io.ReadSeeker, skipUnholdable bool) (*api.SnapshotRestoreResponse, error) {
	path := api.PathAgentSnapshot + "?import=etcd"
	if skipUnholdable {
		path += "&skip_unholdable=true"
	}
	var out api.SnapshotRestoreResponse
	err := c.retry(ctx, true, func(base string) (time.Duration, error) {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return 0, fmt.Errorf("client: rewind snapshot: %w", err)
		}
		resp, ra, err := c.send(ctx, base, http.MethodPost, path, io.NopCloser(r), api.ContentTypeSnapshot)
		if err != nil {
			return ra, err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out); err != nil {
			return 0, fmt.Errorf("client: import answer: %w", err)
		}
		return 0, nil
	})
	return &out, err
}

// send sends one request to the node at base and returns a 2xx response with its body
// unread; any other answer is read, closed and returned as an *Error with its
// Retry-After.
func (c *Client) send(ctx context.Context, base, method, path string, body io.Reader, ctype string) (*http.Response, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return nil, 0, fmt.Errorf("client: %w", err)
	}
	c.authorize(req)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, 0, nil
	}
	defer resp.Body.Close()
	return nil, retryAfterOf(resp), readError(resp)
}

// ApplySchema replaces the schema of the first node that answers with yaml (PUT
// /v1/agent/schema); name is the file name its errors cite, force allows removing a
// resource that has stored objects. A schema is per node: give the client one
// endpoint. The answer is the change as JSON (package versions' SchemaChange).
func (c *Client) ApplySchema(ctx context.Context, name string, yaml []byte, force bool) (json.RawMessage, error) {
	q := url.Values{"file": {name}}
	if force {
		q.Set("force", "true")
	}
	var out json.RawMessage
	err := c.do(ctx, call{method: http.MethodPut, path: api.PathAgentSchema, query: q, body: yaml,
		ctype: "application/yaml", write: true}, &out)
	return out, err
}

// Health asks the first node (one request, no retry) whether it is live (GET /livez:
// the process serves) or, with ready, ready (GET /readyz?verbose: a leader is known
// and the node can serve; the answer lists each check). It returns the answer's body;
// the error is an *Error for any status but 200.
func (c *Client) Health(ctx context.Context, ready bool) (string, error) {
	path := api.PathLive
	if ready {
		path = api.PathReady + "?verbose"
	}
	resp, _, err := c.send(ctx, c.addrs[0], http.MethodGet, path, nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return string(b), err
}
