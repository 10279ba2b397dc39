package kv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/raft"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		err    error
		code   int
		reason string
	}{
		{ErrInvalidKey, 400, api.ReasonBadRequest},
		{ErrInvalidParam, 400, api.ReasonBadRequest},
		{ErrInvalidBody, 400, api.ReasonBadRequest},
		{fsm.ErrInvalidCommand, 400, api.ReasonBadRequest},
		{fsm.ErrTooManyOps, 400, api.ReasonBadRequest},
		{ErrInvalidContinueToken, 400, api.ReasonInvalidContinueToken},
		{fsm.ErrFutureRevision, 400, api.ReasonFutureRevision},
		{fsm.ErrDuplicateKey, 400, api.ReasonDuplicateKey},
		{fsm.ErrKeyNotFound, 404, api.ReasonNotFound},
		{ErrNoRoute, 404, api.ReasonNotFound},
		{ErrMethodNotAllowed, 405, api.ReasonMethodNotAllowed},
		{ErrConflict, 409, api.ReasonConflict},
		{ErrDowngraded, 409, api.ReasonDowngraded},
		{ErrReservedPrefix, 403, api.ReasonReservedPrefix},
		{fsm.ErrCompacted, 410, api.ReasonResourceExpired},
		{&expiredError{err: fsm.ErrCompacted, cont: "x"}, 410, api.ReasonResourceExpired},
		{ErrTooLarge, 413, api.ReasonTooLarge},
		{raft.ErrNoLeader, 503, api.ReasonNoLeader},
		{raft.ErrNotLeader, 503, api.ReasonUnavailable},
		{ErrNotReady, 503, api.ReasonUnavailable},
		{raft.ErrShutdown, 503, api.ReasonShuttingDown},
		{raft.ErrTimeout, 504, api.ReasonTimeout},
		{context.DeadlineExceeded, 504, api.ReasonTimeout},
		{context.Canceled, 504, api.ReasonTimeout},
		{fsm.ErrCorrupt, 500, api.ReasonInternal},
		{fsm.ErrUnknownFormat, 500, api.ReasonInternal},
		{errors.New("surprise"), 500, api.ReasonInternal},
	}
	for i, tt := range tests {
		wrapped := fmt.Errorf("op %q: %w", "k", tt.err)
		if code, reason := classify(wrapped); code != tt.code || reason != tt.reason {
			t.Errorf("#%d: classify(%v) = %d %s, want %d %s", i, tt.err, code, reason, tt.code, tt.reason)
		}
	}
}

// funcStore is a Store whose behaviour is set per test; it wraps a LocalStore.
type funcStore struct {
	*kvtest.LocalStore
	apply func(context.Context, *fsm.Command) (*fsm.Result, error)
}

var _ Store = funcStore{}

func (f funcStore) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	return f.apply(ctx, cmd)
}

// TestInternalErrors: a store that misbehaves (no result, a panic, a corrupt entry)
// yields a JSON 500, and the server keeps serving.
func TestInternalErrors(t *testing.T) {
	tests := []func(context.Context, *fsm.Command) (*fsm.Result, error){
		func(context.Context, *fsm.Command) (*fsm.Result, error) { return nil, nil },
		func(context.Context, *fsm.Command) (*fsm.Result, error) { panic("boom") },
		func(context.Context, *fsm.Command) (*fsm.Result, error) { return &fsm.Result{Err: fsm.ErrCorrupt}, nil },
	}
	for i, apply := range tests {
		srv, err := NewServer(DefaultConfig(), funcStore{kvtest.New(), apply}, nil)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv.Handler())
		ts := &testServer{t: t, srv: srv, url: hs.URL}
		e := ts.expectError(http.MethodPut, "/v1/kv/k", []byte("v"), 500, api.ReasonInternal)
		if e.Message == "" {
			t.Errorf("#%d: empty message", i)
		}
		ts.doJSON(http.MethodGet, "/healthz", nil, 200, nil)
		hs.Close()
	}
}
