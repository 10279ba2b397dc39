package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/kv/api"
)

// Txn runs a transaction. A failed guard is not an error: Succeeded is false and the
// failure branch ran. A transaction that only reads is retried like a read. With
// Options.Stream it goes over the stream protocol to a node that serves it there.
func (c *Client) Txn(ctx context.Context, txn *api.TxnRequest) (*api.TxnResponse, error) {
	var resp api.TxnResponse
	body, err := json.Marshal(txn)
	if err != nil {
		return nil, fmt.Errorf("client: encode txn body: %w", err)
	}
	write := writes(txn)
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodPost, path: api.PathTxn, body: body,
			ctype: "application/json", write: write}, &resp)
	}
	if !c.opts.Stream {
		if err := overHTTP(); err != nil {
			return nil, err
		}
		return &resp, nil
	}
	sr, err := c.doStreamAs(ctx, api.StreamRequest{Op: api.StreamTxn, Value: body}, write, overHTTP)
	switch {
	case IsTooLarge(err) && !write:
		err = overHTTP() // an answer too large for a frame: it only read, ask again
	case err == nil && sr != nil:
		if jerr := json.Unmarshal(sr.Body, &resp); jerr != nil {
			return nil, fmt.Errorf("client: txn: %w: %v", errBrokenResponse, jerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return &resp, nil
}

// Compact discards history at and below revision: reads below it then fail with 410.
func (c *Client) Compact(ctx context.Context, revision int64) (*api.CompactResponse, error) {
	var resp api.CompactResponse
	if err := c.postJSON(ctx, api.PathCompact, api.CompactRequest{Revision: revision}, &resp, true); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Status returns the status of the first node that answers.
func (c *Client) Status(ctx context.Context) (*api.StatusResponse, error) {
	var resp api.StatusResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: api.PathStatus}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any, write bool) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("client: encode %s body: %w", path, err)
	}
	return c.do(ctx, call{method: http.MethodPost, path: path, body: body,
		ctype: "application/json", write: write}, out)
}

// writes reports whether txn may change state.
func writes(txn *api.TxnRequest) bool {
	for _, ops := range [][]api.Op{txn.Success, txn.Failure} {
		for _, op := range ops {
			if op.Type != api.OpGet {
				return true
			}
		}
	}
	return false
}
