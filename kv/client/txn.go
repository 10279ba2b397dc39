package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/kv/api"
)

// Txn runs a transaction. A failed guard is not an error: Succeeded is false and the
// failure branch ran. A transaction that only reads is retried like a read.
func (c *Client) Txn(ctx context.Context, txn *api.TxnRequest) (*api.TxnResponse, error) {
	var resp api.TxnResponse
	if err := c.postJSON(ctx, api.PathTxn, txn, &resp, writes(txn)); err != nil {
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
