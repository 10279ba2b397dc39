package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/internal/ctoken"
)

// Paged scans (KEP-365): one page at a time at the scan's revision, resumed by a
// signed continue token. The KV list (List, core_list.go) and the typed list
// (ResourceList, core_resources.go) read their pages here.

// listRequest is one page request of a paged scan, validated.
type listRequest struct {
	start, end []byte // the scan's range; from the path prefix
	limit      int
	rev        int64 // 0 = latest
	cons       fsm.Consistency
	token      string
	// keys, when set, is the token whose key rights filter the scan (a KV list): the
	// page holds only keys it may read and the continue token names only such a key.
	// A typed list, authorized by resource, leaves it nil.
	keys *acl.Authorizer
	// count asks scan for the remaining item count (countRest).
	count bool
}

// listPage is one page of a scan.
type listPage struct {
	kvs  []fsm.KeyValue
	rev  int64  // the scan's revision
	cont string // the next page's token; "" at the end
	// remaining counts the items after this page when cont is set (countRest); -1
	// when unknown or not asked for.
	remaining int64
}

// scan reads one page of req's scan: at most req.limit items (fewer if they would
// exceed MaxListBytes) at the scan's revision, the continue token for the next page
// ("" at the end), and the remaining count when req.count asks for it. The first page
// fixes the revision (the requested one or the latest); a token carries it, so every
// page reads the same immutable revision on any node.
func (s *Server) scan(ctx context.Context, req listRequest) (listPage, error) {
	pg := listPage{remaining: -1}
	rd, err := s.readPage(ctx, req)
	if err != nil {
		return pg, err
	}
	pg.kvs, pg.rev = rd.kvs, rd.rev
	if rd.next == nil {
		return pg, nil
	}
	if req.count {
		pg.remaining = countRest(rd.view, req, rd.next, rd.rev)
	}
	codec, err := s.tokenCodec(ctx)
	if err != nil {
		return pg, err
	}
	pg.cont = codec.EncodeAs(s.tokenVersion(), ctoken.Token{Revision: rd.rev, Next: rd.next, Start: req.start, End: req.end})
	return pg, nil
}

// pageRead is what readPage read: the items of one page, the key the next page starts
// at (nil at the end of the range), the scan's revision and the view it read.
type pageRead struct {
	kvs  []fsm.KeyValue
	next []byte
	rev  int64
	view *fsm.View
}

// readPage reads one page of req's scan.
func (s *Server) readPage(ctx context.Context, req listRequest) (pageRead, error) {
	from := req.start
	if req.token != "" {
		tok, err := s.decodeToken(ctx, req)
		if err != nil {
			return pageRead{}, err
		}
		from, req.rev = tok.Next, tok.Revision
		if req.rev > 0 {
			// The token proves its revision exists in the cluster: any view that has
			// applied it serves the page exactly, even on a lagging follower asked
			// for serializable reads (viewAt falls back to a linearizable view).
			req.cons = fsm.Linearizable
		}
	}
	view, err := s.viewAt(ctx, req.cons, req.rev)
	if err != nil {
		return pageRead{}, err
	}
	rev := req.rev
	if rev == 0 {
		rev = view.Revision()
	}
	if req.keys != nil {
		from = req.keys.NextReadable(from, req.end) // nil: nothing readable is left
	}
	var kvs []fsm.KeyValue
	var next []byte
	if req.keys == nil || from != nil {
		kvs, next, err = view.Range(from, req.end, rev, req.limit)
	}
	if errors.Is(err, fsm.ErrCompacted) {
		return pageRead{}, s.expired(ctx, req, from, revisionError(view, rev, err))
	}
	if err != nil {
		return pageRead{}, fmt.Errorf("list: %w", revisionError(view, rev, err))
	}
	if cut := s.fitPage(kvs); cut < len(kvs) {
		kvs, next = kvs[:cut], kvs[cut].Key
	}
	if req.keys != nil {
		// Only what the token may read; the page may hold fewer items (or none) and
		// still carry a continue token, which resumes at a key it may read.
		kvs = slices.DeleteFunc(kvs, func(kv fsm.KeyValue) bool { return !req.keys.Key(kv.Key, false) })
		if next != nil {
			next = req.keys.NextReadable(next, req.end)
		}
	}
	return pageRead{kvs: kvs, next: next, rev: rev, view: view}, nil
}

// countRest counts the items of [next, end) at rev, exactly. The store counts a range
// from its tree's ranks without visiting it (fsm.View.Count: O(log n), plus the keys
// written since rev when rev is older than the view), so every page carries its
// count at the cost of the page. Under ACLs only the keys the token may read count:
// when its rules cover the whole rest (acl Span) that is the same count; when they
// cover part of it, the readable keys can only be counted by visiting them, so it
// counts them when the rest fits in one more page of req.limit (a page then costs at
// most twice its own read) and is -1 (unknown) when the range goes on beyond it.
func countRest(view *fsm.View, req listRequest, next []byte, rev int64) int64 {
	end := req.end
	if end == nil {
		end = []byte{} // a list's nil end is the end of the keyspace; Count's is key alone
	}
	if req.keys == nil || req.keys.Span(next, req.end, false) {
		n, err := view.Count(next, end, rev)
		if err != nil {
			return -1
		}
		return n
	}
	kvs, more, err := view.Range(next, req.end, rev, req.limit)
	if err != nil || more != nil {
		return -1
	}
	n := int64(0)
	for _, kv := range kvs {
		if req.keys == nil || req.keys.Key(kv.Key, false) {
			n++
		}
	}
	return n
}

// decodeToken authenticates req's continue token and checks it against the request:
// same range, next key inside it, and no ?revision= that disagrees.
func (s *Server) decodeToken(ctx context.Context, req listRequest) (ctoken.Token, error) {
	codec, err := s.tokenCodec(ctx)
	if err != nil {
		return ctoken.Token{}, err
	}
	tok, err := codec.Decode(req.token)
	if err != nil {
		return ctoken.Token{}, err
	}
	if err := tok.CheckRange(req.start, req.end); err != nil {
		return ctoken.Token{}, err
	}
	if req.rev != 0 && req.rev != tok.Revision {
		return ctoken.Token{}, fmt.Errorf("%w: revision=%d disagrees with the continue token's revision %d",
			ErrInvalidParam, req.rev, tok.Revision)
	}
	return tok, nil
}

// formatLimiter is the part of a raft.Node that tells which command formats every
// voter applies (raft's command-format gate).
type formatLimiter interface{ CommandFormatLimit() byte }

// tokenVersion is the continue-token format this node issues: version 2 (sealed) once
// every voter applies command format 3, which every release that reads version 2 does
// and the releases before it (85d08eb, format 2 at most) do not; version 1 before, so
// a node of the older release can resume the scan (kv/internal/ctoken, Compatibility).
func (s *Server) tokenVersion() byte {
	if fl, ok := s.store.(formatLimiter); ok && fl.CommandFormatLimit() < fsm.CommandFormatV3 {
		return ctoken.Version1
	}
	return ctoken.Version2
}

// expired is the 410 of a scan whose revision is compacted. It carries an inconsistent
// continue token that resumes from the same key at the latest revision (KEP-365), for
// clients that prefer a complete scan to a consistent one.
func (s *Server) expired(ctx context.Context, req listRequest, from []byte, err error) error {
	codec, cerr := s.tokenCodec(ctx)
	if cerr != nil {
		return err // without the secret nothing can be signed; the plain 410 stands
	}
	if len(from) == 0 {
		from = []byte{0} // the smallest non-empty key: a scan of everything from the start
	}
	cont := codec.EncodeAs(s.tokenVersion(), ctoken.Token{Revision: 0, Next: from, Start: req.start, End: req.end})
	err = fmt.Errorf("list: %w; restart the scan, or continue it inconsistently "+
		"at the latest revision with this error's continue token", err)
	return &expiredError{err: err, cont: cont}
}

// fitPage returns how many of kvs fit in one page of MaxListBytes (at least one), so
// that a page of large values cannot exhaust memory.
func (s *Server) fitPage(kvs []fsm.KeyValue) int {
	size := 0
	for i, kv := range kvs {
		size += itemBytes(kv)
		if size > s.cfg.MaxListBytes && i > 0 {
			return i
		}
	}
	return len(kvs)
}

// itemBytes estimates the bytes of one list item in a JSON answer: key, base64 value
// and the metadata around them.
func itemBytes(kv fsm.KeyValue) int { return len(kv.Key) + (len(kv.Value)*4+2)/3 + 96 }
