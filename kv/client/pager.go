package client

import (
	"context"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/keel-kv/keel/kv/api"
)

// ListOptions selects one page of a list.
type ListOptions struct {
	// Limit is the page size. 0 asks for the whole list: the server answers with
	// every key or, when they are more than its bound (10000 keys or 32 MiB by
	// default), a 413 ListTooLarge error ([IsTooLarge]); then page with a Limit.
	Limit int
	// Continue is the previous page's continue token ("" = the first page).
	Continue string
	// Revision reads at this revision (0 = the latest, or the token's).
	Revision int64
	// Serializable reads the answering node's local state for the first page.
	Serializable bool
}

// List returns one page of the keys starting with prefix ("" = every key), or all of
// them when opts.Limit is 0. Pass the answer's Continue in ListOptions.Continue for
// the next page; the scan is complete when it is empty. A page may hold zero items and
// still have a Continue. The Continue token is opaque: pass it back unchanged.
func (c *Client) List(ctx context.Context, prefix string, opts ListOptions) (*api.ListResponse, error) {
	q := url.Values{api.ParamList: {"true"}}
	if opts.Limit > 0 {
		q.Set(api.ParamLimit, strconv.Itoa(opts.Limit))
	}
	if opts.Continue != "" {
		q.Set(api.ParamContinue, opts.Continue)
	}
	if opts.Revision > 0 {
		q.Set(api.ParamRevision, strconv.FormatInt(opts.Revision, 10))
	}
	if opts.Serializable {
		q.Set(api.ParamConsistency, api.ConsistencySerializable)
	}
	var resp api.ListResponse
	cl := call{method: http.MethodGet, path: keyPath(prefix), query: q, accept: api.ContentTypeBinaryList}
	if err := c.do(ctx, cl, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// DefaultPageLimit is a Pager's page size when PagerOptions.Limit is 0.
const DefaultPageLimit = 1000

// PagerOptions configures a Pager.
type PagerOptions struct {
	// Limit is the page size (0 = DefaultPageLimit). A pager always asks for pages.
	Limit int
	// Revision scans at this revision (0 = the latest when the first page is read).
	Revision int64
	// Serializable reads the first page from the answering node's local state.
	Serializable bool
	// AllowInconsistent: when the scan's revision is compacted mid-scan (410), go on
	// from the same key at the latest revision instead of failing. The result is then
	// complete but not one snapshot: keys before and after the switch are read at
	// different revisions (Inconsistent reports it). Without it Next returns the 410
	// error ([IsCompacted]) and the scan must restart.
	AllowInconsistent bool
}

// Pager reads a prefix page by page, following continue tokens: every key of the
// prefix exactly once, all at one revision (unless AllowInconsistent switched it). A
// Pager is not safe for concurrent use.
type Pager struct {
	c            *Client
	prefix       string
	opts         PagerOptions
	token        string
	rev          int64
	done         bool
	inconsistent bool
}

// NewPager returns a pager over the keys starting with prefix ("" = every key).
func (c *Client) NewPager(prefix string, opts PagerOptions) *Pager {
	if opts.Limit <= 0 {
		opts.Limit = DefaultPageLimit
	}
	return &Pager{c: c, prefix: prefix, opts: opts, rev: opts.Revision}
}

// Next returns the next page's items; an empty page is legal and does not mean the
// end. After the last page Done is true and Next returns io.EOF. An error leaves the
// pager where it was: calling Next again retries the same page.
func (p *Pager) Next(ctx context.Context) ([]api.KV, error) {
	if p.done {
		return nil, io.EOF
	}
	opts := ListOptions{Limit: p.opts.Limit, Continue: p.token, Serializable: p.opts.Serializable}
	if p.token == "" {
		opts.Revision = p.rev
	}
	resp, err := p.c.List(ctx, p.prefix, opts)
	if err != nil {
		e, ok := asError(err)
		if !ok || !IsCompacted(err) || !p.opts.AllowInconsistent || e.Continue == "" {
			return nil, err
		}
		p.inconsistent = true
		opts = ListOptions{Limit: p.opts.Limit, Continue: e.Continue}
		if resp, err = p.c.List(ctx, p.prefix, opts); err != nil {
			return nil, err
		}
	}
	p.rev, p.token, p.done = resp.Revision, resp.Continue, resp.Continue == ""
	return resp.Items, nil
}

// Done reports whether the last page has been read.
func (p *Pager) Done() bool { return p.done }

// Revision is the revision of the pages read so far (0 before the first page). After
// an inconsistent switch it is the revision of the latest page.
func (p *Pager) Revision() int64 { return p.rev }

// Inconsistent reports whether the scan went on at a newer revision after a 410.
func (p *Pager) Inconsistent() bool { return p.inconsistent }

// All iterates over every remaining key. On an error it yields the error once and
// stops; breaking out of the loop stops the scan.
func (p *Pager) All(ctx context.Context) iter.Seq2[api.KV, error] {
	return func(yield func(api.KV, error) bool) {
		for !p.done {
			items, err := p.Next(ctx)
			if err != nil {
				yield(api.KV{}, err)
				return
			}
			for _, kv := range items {
				if !yield(kv, nil) {
					return
				}
			}
		}
	}
}
