package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// ErrLeaseLost is what KeepAlive reports when it can no longer vouch for its lease:
// the lease is gone (revoked or expired: IsLeaseNotFound) or the time the last
// keepalive guaranteed ran out before another one succeeded.
var ErrLeaseLost = errors.New("client: lease lost")

// IsLeaseNotFound reports a 404 LeaseNotFound: the lease does not exist (never
// granted, revoked, or expired).
func IsLeaseNotFound(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusNotFound && e.Reason == api.ReasonLeaseNotFound
}

func leasePath(id int64) string { return api.PathLeases + "/" + strconv.FormatInt(id, 10) }

// Grant creates a lease of ttl (whole seconds, 1 s to 1 day) and returns its ID.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (*api.LeaseGrantResponse, error) {
	var resp api.LeaseGrantResponse
	req := api.LeaseGrantRequest{TTL: int64(ttl / time.Second)}
	overHTTP := func() error { return c.postJSON(ctx, api.PathLeases, req, &resp, true) }
	if !c.opts.Stream {
		return &resp, overHTTP()
	}
	sr, err := c.doStream(ctx, api.StreamRequest{Op: api.StreamLeaseGrant, TTL: time.Duration(req.TTL) * time.Second}, overHTTP)
	if err != nil {
		return nil, err
	}
	if sr != nil {
		resp = api.LeaseGrantResponse{ID: sr.LeaseID, TTL: int64(sr.TTL / time.Second)}
	}
	return &resp, nil
}

// KeepAliveOnce renews lease id once. The answer's TTL is how long the lease is
// guaranteed to live from now on, whatever leader changes come.
func (c *Client) KeepAliveOnce(ctx context.Context, id int64) (*api.LeaseKeepAliveResponse, error) {
	var resp api.LeaseKeepAliveResponse
	// A keepalive is idempotent: retried like a read.
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodPost, path: leasePath(id) + "/keepalive"}, &resp)
	}
	if !c.opts.Stream {
		return &resp, overHTTP()
	}
	sr, err := c.doStream(ctx, api.StreamRequest{Op: api.StreamLeaseKeepAlive, LeaseID: id}, overHTTP)
	if err != nil {
		return nil, err
	}
	if sr != nil {
		resp = api.LeaseKeepAliveResponse{ID: id, TTL: int64(sr.TTL / time.Second), TTLMillis: sr.TTL.Milliseconds()}
	}
	return &resp, nil
}

// Revoke deletes lease id and every key attached to it, at one revision.
func (c *Client) Revoke(ctx context.Context, id int64) (*api.LeaseRevokeResponse, error) {
	var resp api.LeaseRevokeResponse
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodDelete, path: leasePath(id), write: true}, &resp)
	}
	if !c.opts.Stream {
		return &resp, overHTTP()
	}
	sr, err := c.doStream(ctx, api.StreamRequest{Op: api.StreamLeaseRevoke, LeaseID: id}, overHTTP)
	if err != nil {
		return nil, err
	}
	if sr != nil {
		resp = api.LeaseRevokeResponse{Revision: sr.Revision, Deleted: sr.Deleted}
	}
	return &resp, nil
}

// Lease returns lease id: its granted TTL, time left and attached keys.
func (c *Client) Lease(ctx context.Context, id int64) (*api.LeaseResponse, error) {
	var resp api.LeaseResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: leasePath(id)}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Leases lists every lease.
func (c *Client) Leases(ctx context.Context) ([]api.LeaseInfo, error) {
	var resp api.LeaseListResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: api.PathLeases}, &resp); err != nil {
		return nil, err
	}
	return resp.Leases, nil
}

// PutLease writes key = value attached to lease (0 detaches the key, like Put).
func (c *Client) PutLease(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	if value == nil {
		value = []byte{}
	}
	var resp api.PutResponse
	q := url.Values{api.ParamLease: {strconv.FormatInt(lease, 10)}}
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodPut, path: keyPath(key), query: q, body: value,
			ctype: "application/octet-stream", write: true}, &resp)
	}
	if !c.opts.Stream {
		return resp.Revision, overHTTP()
	}
	sr, err := c.doStream(ctx, api.StreamRequest{Op: api.StreamPut, Key: []byte(key), Value: value, HasLease: true, LeaseID: lease}, overHTTP)
	if err != nil {
		return 0, err
	}
	if sr != nil {
		resp.Revision = sr.Revision
	}
	return resp.Revision, nil
}

// KeepAlive keeps lease id alive until ctx ends, from a goroutine it starts: it sends
// a keepalive every third of the time the previous one guaranteed (at least every
// 100 ms apart), retrying failures on other nodes; an attempt that gets no answer is
// given up after half the time left, and the next goes to another node. The returned channel is closed when
// ctx ends; before that, if the lease is lost, it receives one error wrapping
// ErrLeaseLost (and the cause) and is closed: the lease is gone, or the time the last
// keepalive guaranteed ran out without a successful renewal. A holder of a lock must
// stop acting on it at once then.
func (c *Client) KeepAlive(ctx context.Context, id int64) <-chan error {
	lost := make(chan error, 1)
	go func() {
		defer close(lost)
		guaranteed := time.Now().Add(time.Second) // a lease lives at least 1 s after its grant
		for {
			// One attempt may take at most half the time left (and at least 300 ms), so a
			// node that holds the request (a leader cut off from its peers answers only
			// once the renewal commits or it steps down) leaves time to try the others:
			// the client starts the next call on another node after a timeout.
			deadline := guaranteed
			if half := time.Until(guaranteed) / 2; half > 300*time.Millisecond {
				deadline = time.Now().Add(half)
			}
			callCtx, cancel := context.WithDeadline(ctx, deadline)
			start := time.Now()
			resp, err := c.KeepAliveOnce(callCtx, id)
			cancel()
			if ctx.Err() != nil {
				return
			}
			var wait time.Duration
			switch {
			case err == nil:
				left := time.Duration(resp.TTLMillis) * time.Millisecond
				guaranteed = start.Add(left)
				wait = max(left/3, 100*time.Millisecond)
			case IsLeaseNotFound(err):
				lost <- fmt.Errorf("%w: lease %d: %w", ErrLeaseLost, id, err)
				return
			case !time.Now().Before(guaranteed):
				lost <- fmt.Errorf("%w: lease %d: no keepalive succeeded in time: %w", ErrLeaseLost, id, err)
				return
			default:
				wait = 100 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}()
	return lost
}
