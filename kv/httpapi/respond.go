package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// handlerFunc is a route handler that returns its failure instead of writing it; wrap
// turns it into an http.Handler that answers the failure through writeError.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// A panic in a handler is logged and answered as a JSON 500 (when nothing was written
// yet) instead of a dropped connection.
func (s *Server) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p,
					"stack", string(debug.Stack()))
				s.writeError(w, r, fmt.Errorf("internal error: %v", p))
			}
		}()
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// call serves a route that takes no query parameter and no body: op runs for the
// request's caller under the request deadline, and its result is the 200 JSON answer.
// check (nil: none) is the core's right check of the operation, asked before the
// request is looked at, so that a caller without the right learns nothing else.
func (s *Server) call(check func(kv.Caller) error, op func(ctx context.Context, c kv.Caller, r *http.Request) (any, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if check != nil {
			if err := check(CallerOf(r)); err != nil {
				return err
			}
		}
		if _, err := parseParams(r); err != nil {
			return err
		}
		return s.answer(w, r, func(ctx context.Context, c kv.Caller) (any, error) { return op(ctx, c, r) })
	}
}

// answer runs op for r's caller under the request deadline and writes its result as
// the 200 JSON answer (call's and callBody's last step).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, c kv.Caller) (any, error)) error {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	v, err := op(ctx, CallerOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// callBody is call for a route whose request is a JSON body of at most max bytes (and
// no query parameter), decoded into a T; what names it in errors ("acl token: ...").
// A caller check refuses is answered without its body being read.
func callBody[T any](s *Server, check func(kv.Caller) error, max int64, what string,
	op func(ctx context.Context, c kv.Caller, r *http.Request, body T) (any, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := check(CallerOf(r)); err != nil {
			drainBody(w, r, max)
			return err
		}
		var body T
		if err := decodeJSONBody(w, r, max, what+" body", what, &body); err != nil {
			return err
		}
		return s.answer(w, r, func(ctx context.Context, c kv.Caller) (any, error) { return op(ctx, c, r, body) })
	}
}

// routes registers every route of the API. Each path also gets a method-less
// fallback so that a wrong method is a JSON 405 rather than ServeMux's plain text.
func (s *Server) routes() {
	s.route(api.PathKV+"{key...}", map[string]handlerFunc{
		http.MethodGet:    s.handleGet,
		http.MethodPut:    s.handlePut,
		http.MethodDelete: s.handleDelete,
	})
	s.route(api.PathWatch+"{key...}", map[string]handlerFunc{http.MethodGet: s.handleWatch})
	s.route(api.PathStream, map[string]handlerFunc{http.MethodGet: s.handleStream})
	s.route(api.PathTxn, map[string]handlerFunc{http.MethodPost: s.handleTxn})
	s.route(api.PathCompact, map[string]handlerFunc{http.MethodPost: s.handleCompact})
	// GET /v1/status answers from local state; it never waits for a leader. Its route
	// is open; what it tells a caller is the core's rule (StatusFor).
	s.route(api.PathStatus, map[string]handlerFunc{http.MethodGet: s.call(nil,
		func(ctx context.Context, _ kv.Caller, r *http.Request) (any, error) {
			return s.core.StatusFor(ctx, r.Header.Get(api.HeaderAuthorization), func() *tls.ConnectionState { return TLSState(r) })
		})})
	s.route(api.PathHealth, map[string]handlerFunc{http.MethodGet: s.handleHealth})
	s.route(api.PathReady, map[string]handlerFunc{http.MethodGet: s.handleReady})
	s.apiRoutes()
	s.leaseRoutes()
	s.aclRoutes()
	s.register("/", s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return kv.ErrNoRoute
	}), true)
}

func (s *Server) route(path string, methods map[string]handlerFunc) {
	allowed := make([]string, 0, len(methods)+1)
	for m, h := range methods {
		s.register(m+" "+path, s.wrap(h), false)
		allowed = append(allowed, m)
		if m == http.MethodGet {
			allowed = append(allowed, http.MethodHead)
		}
	}
	sort.Strings(allowed)
	allow := strings.Join(allowed, ", ")
	s.register(path, s.wrap(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allow)
		return kv.ErrMethodNotAllowed
	}), true)
}

// writeJSON writes v as the JSON body with status code. An encoding failure after the
// header is out can only be logged by the caller's access log (the status is sent).
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err as an api.Error with the status kv.WireError picks.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := kv.WireError(err, r.Method != http.MethodGet)
	switch body.Code {
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter.Seconds())))
	case http.StatusInternalServerError:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, body.Code, body)
}

// WriteError answers err as keel's one error table says (kv.WireError): the routes a
// node adds with Handle answer their errors through it.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	s.writeError(w, r, err)
}
