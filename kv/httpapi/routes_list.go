package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// handleList serves GET /v1/kv/{prefix...}?list=true: the keys starting with prefix
// (everything when the prefix is empty), one page of them with ?limit=.
//
// With ?limit= each page is one View.Range of at most limit items, so it costs
// O(limit·log n) and never counts the range. The first page fixes the scan's revision
// (the requested one, or the latest); the continue token carries it, with the next key
// and the range, so every later page reads the same immutable revision on whichever
// node serves it. Without ?limit= the answer is the whole list or ErrListTooLarge
// (scanAll): a client that did not ask for pages never gets a partial list.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request, p params) error {
	lr, err := parseList(r, p)
	if err != nil {
		return err
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	pg, err := s.core.List(ctx, CallerOf(r), lr)
	if err != nil {
		return err
	}
	if strings.Contains(r.Header.Get("Accept"), api.ContentTypeBinaryList) {
		writeBinaryList(w, pg.KVs, pg.Revision, pg.Continue)
		return nil
	}
	resp := api.ListResponse{Items: make([]api.KV, 0, len(pg.KVs)), Revision: pg.Revision, Continue: pg.Continue}
	for _, item := range pg.KVs {
		resp.Items = append(resp.Items, kv.APIKV(item))
	}
	if pg.Remaining >= 0 {
		resp.RemainingItemCount = &pg.Remaining
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// binListBufs recycles the buffers of binary list pages (a page is up to MaxListBytes).
var binListBufs = sync.Pool{New: func() any { return new([]byte) }}

// writeBinaryList answers a list page in api.ContentTypeBinaryList.
func writeBinaryList(w http.ResponseWriter, kvs []fsm.KeyValue, rev int64, cont string) {
	bp := binListBufs.Get().(*[]byte)
	b := api.AppendBinaryListHeader((*bp)[:0], rev, cont, len(kvs))
	for _, kv := range kvs {
		b = api.AppendBinaryListItem(b, api.BinaryListItem{Key: kv.Key, Value: kv.Value,
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version})
	}
	w.Header().Set("Content-Type", api.ContentTypeBinaryList)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
	*bp = b
	binListBufs.Put(bp)
}

// parseList reads the parameters of a list request into the core's (validated by List).
func parseList(r *http.Request, p params) (kv.ListRequest, error) {
	lr := kv.ListRequest{Prefix: r.PathValue("key")}
	if p.has(api.ParamRaw) {
		return lr, fmt.Errorf("%w: raw cannot be combined with list=true", kv.ErrInvalidParam)
	}
	var err error
	if lr.Limit, err = p.int64(api.ParamLimit, 0, 0); err != nil {
		return lr, err
	}
	if lr.Revision, err = p.int64(api.ParamRevision, 0, 0); err != nil {
		return lr, err
	}
	cons, err := p.consistency()
	if err != nil {
		return lr, err
	}
	lr.Serializable = cons == fsm.Serializable
	lr.Continue = p.get(api.ParamContinue)
	if p.has(api.ParamContinue) && lr.Continue == "" {
		return lr, fmt.Errorf("%w: continue is empty", kv.ErrInvalidParam)
	}
	if p.has(api.ParamRevisionMatch) {
		switch match := p.get(api.ParamRevisionMatch); match {
		case api.RevisionMatchExact:
			lr.Match = kv.MatchExact
		case api.RevisionMatchNotOlderThan:
			lr.Match = kv.MatchNotOlderThan
		default:
			return lr, fmt.Errorf("%w: %s=%q: want %q or %q", kv.ErrInvalidParam, api.ParamRevisionMatch, match,
				api.RevisionMatchExact, api.RevisionMatchNotOlderThan)
		}
	}
	return lr, nil
}
