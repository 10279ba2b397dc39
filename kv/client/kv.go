package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/keel-kv/keel/kv/api"
)

// keyPath is the escaped path of key. "/" and "." are escaped too, so that a key with
// empty, "." or ".." segments reaches the server as the same key instead of being
// cleaned into another one.
func keyPath(key string) string {
	return api.PathKV + strings.ReplaceAll(url.PathEscape(key), ".", "%2E")
}

// Put writes key = value and returns the write's revision.
func (c *Client) Put(ctx context.Context, key string, value []byte) (int64, error) {
	return c.put(ctx, key, value, nil)
}

// PutCAS writes key = value only if the key's mod revision is prevRevision (0 = only
// if the key does not exist). A mismatch is a 409 ([IsConflict]) and writes nothing.
func (c *Client) PutCAS(ctx context.Context, key string, value []byte, prevRevision int64) (int64, error) {
	q := url.Values{api.ParamPrevRevision: {strconv.FormatInt(prevRevision, 10)}}
	return c.put(ctx, key, value, q)
}

func (c *Client) put(ctx context.Context, key string, value []byte, q url.Values) (int64, error) {
	if value == nil {
		value = []byte{}
	}
	var resp api.PutResponse
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodPut, path: keyPath(key), query: q, body: value,
			ctype: "application/octet-stream", write: true}, &resp)
	}
	if !c.opts.Stream {
		return resp.Revision, overHTTP()
	}
	req := api.StreamRequest{Op: api.StreamPut, Key: []byte(key), Value: value}
	req.PrevRevision, req.HasPrev = queryInt(q, api.ParamPrevRevision)
	sr, err := c.doStream(ctx, req, overHTTP)
	if sr != nil {
		resp.Revision = sr.Revision
	}
	return resp.Revision, err
}

// queryInt reads an integer parameter the options of this package set.
func queryInt(q url.Values, name string) (int64, bool) {
	if !q.Has(name) {
		return 0, false
	}
	v, _ := strconv.ParseInt(q.Get(name), 10, 64)
	return v, true
}

// GetOption modifies a read.
type GetOption func(url.Values)

// WithRevision reads at revision rev instead of the latest (410 if compacted).
func WithRevision(rev int64) GetOption {
	return func(q url.Values) { q.Set(api.ParamRevision, strconv.FormatInt(rev, 10)) }
}

// WithSerializable reads the answering node's local state: no round trip to the leader,
// but possibly stale.
func WithSerializable() GetOption {
	return func(q url.Values) { q.Set(api.ParamConsistency, api.ConsistencySerializable) }
}

// Get reads key ([IsNotFound] when absent).
func (c *Client) Get(ctx context.Context, key string, opts ...GetOption) (*api.GetResponse, error) {
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	var resp api.GetResponse
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodGet, path: keyPath(key), query: q}, &resp)
	}
	if !c.opts.Stream {
		if err := overHTTP(); err != nil {
			return nil, err
		}
		return &resp, nil
	}
	req := api.StreamRequest{Op: api.StreamGet, Key: []byte(key),
		Serializable: q.Get(api.ParamConsistency) == api.ConsistencySerializable}
	req.Revision, _ = queryInt(q, api.ParamRevision)
	sr, err := c.doStream(ctx, req, overHTTP)
	if err != nil {
		return nil, err
	}
	if sr != nil {
		sr.KV.Key = key
		resp = api.GetResponse{KV: sr.KV, Revision: sr.Revision}
	}
	return &resp, nil
}

// Delete deletes key; deleting an absent key is not an error (Deleted is 0).
func (c *Client) Delete(ctx context.Context, key string) (*api.DeleteResponse, error) {
	return c.del(ctx, key, nil)
}

// DeleteCAS deletes key only if its mod revision is prevRevision (>= 1); a mismatch
// is a 409 ([IsConflict]).
func (c *Client) DeleteCAS(ctx context.Context, key string, prevRevision int64) (*api.DeleteResponse, error) {
	return c.del(ctx, key, url.Values{api.ParamPrevRevision: {strconv.FormatInt(prevRevision, 10)}})
}

// DeletePrefix deletes every key starting with prefix (which must not be empty).
func (c *Client) DeletePrefix(ctx context.Context, prefix string) (*api.DeleteResponse, error) {
	return c.del(ctx, prefix, url.Values{api.ParamPrefix: {"true"}})
}

func (c *Client) del(ctx context.Context, key string, q url.Values) (*api.DeleteResponse, error) {
	var resp api.DeleteResponse
	overHTTP := func() error {
		return c.do(ctx, call{method: http.MethodDelete, path: keyPath(key), query: q, write: true}, &resp)
	}
	if !c.opts.Stream || q.Has(api.ParamPrefix) {
		if err := overHTTP(); err != nil {
			return nil, err
		}
		return &resp, nil
	}
	req := api.StreamRequest{Op: api.StreamDelete, Key: []byte(key)}
	req.PrevRevision, req.HasPrev = queryInt(q, api.ParamPrevRevision)
	sr, err := c.doStream(ctx, req, overHTTP)
	if err != nil {
		return nil, err
	}
	if sr != nil {
		resp = api.DeleteResponse{Revision: sr.Revision, Deleted: sr.Deleted}
	}
	return &resp, nil
}
