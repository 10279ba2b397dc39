package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/keel-kv/keel/kv/api"
)

// handleHealth serves GET /healthz: 200 while the process can answer HTTP.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
	return nil
}

// handleReady serves GET /readyz: 200 only when the node is ready (kv.Server.Ready:
// a known leader, the cluster secret, its log applied up to the commit index it
// knows, every added check); otherwise 503 with every reason.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if r.URL.Query().Has("verbose") {
		s.writeVerboseReady(ctx, w)
		return nil
	}
	if err := s.core.Ready(ctx); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
	return nil
}

// writeVerboseReady answers /readyz?verbose like Kubernetes: one [+] or [-] line per
// check, then the verdict; 200 when every check passes, else 503.
func (s *Server) writeVerboseReady(ctx context.Context, w http.ResponseWriter) {
	var b strings.Builder
	ok := true
	for _, c := range s.core.ReadyChecks(ctx) {
		if note, isNote := c.Note(); isNote {
			fmt.Fprintf(&b, "[+]%s ok: %s\n", c.Name, note)
		} else if c.Err == nil {
			fmt.Fprintf(&b, "[+]%s ok\n", c.Name)
		} else {
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.Name, c.Err)
		}
	}
	code := http.StatusOK
	if ok {
		b.WriteString("readyz check passed\n")
	} else {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
		b.WriteString("readyz check failed\n")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, b.String())
}
