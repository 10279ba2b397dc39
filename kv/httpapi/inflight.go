package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/keel-kv/keel/kv/api"
)

// limitInFlight answers 429 to a request beyond MaxInFlight, or whose body would take
// its client or the node over their request bytes in flight (kv.Server.AdmitBody).
// Health checks, the stream upgrade (its requests count one by one) and watches are
// not counted.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if uncounted(r) {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.core.AdmitRequest(r.RemoteAddr); err != nil {
			s.writeError(w, r, err)
			return
		}
		defer s.core.ReleaseRequest(r.RemoteAddr)
		release, err := s.core.AdmitBody(r.RemoteAddr, r.ContentLength)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// countStream counts every HTTP/2 (h2c) request, a watch above all, against its
// client's connections-and-streams budget (kv.Server.OpenStream) while it runs, as
// an HTTP/1.1 request holds its connection's slot: one h2c connection would otherwise
// carry MaxStreamInFlight watches for the price of one slot. One over the budget is
// answered 429 TooManyConnections; HTTP/1.1 requests pass (their connection counts).
func (s *Server) countStream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			next.ServeHTTP(w, r)
			return
		}
		release, err := s.core.OpenStream(r.RemoteAddr)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

func uncounted(r *http.Request) bool {
	switch r.URL.Path {
	case api.PathHealth, api.PathReady, api.PathLive, api.PathStream:
		return true
	}
	return strings.HasPrefix(r.URL.Path, api.PathWatch) || hasWatchParam(r.URL.RawQuery)
}

// hasWatchParam is url.ParseQuery(raw).Has("watch") without parsing (a map and its
// slices per request) a query that cannot hold it: one with neither "watch" nor an
// escape in it.
func hasWatchParam(raw string) bool {
	if !strings.Contains(raw, "watch") && !strings.Contains(raw, "%") {
		return false
	}
	q, _ := url.ParseQuery(raw)
	return q.Has("watch")
}
