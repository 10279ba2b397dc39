package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// funcStore is a Store whose behaviour is set per test; it wraps a LocalStore.
type funcStore struct {
	*kvtest.LocalStore
	apply func(context.Context, *fsm.Command) (*fsm.Result, error)
}

var _ kv.Store = funcStore{}

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
		ts, hs := serveStore(t, funcStore{kvtest.New(), apply}, kv.DefaultConfig())
		e := ts.expectError(http.MethodPut, "/v1/kv/k", []byte("v"), 500, api.ReasonInternal)
		if e.Message == "" {
			t.Errorf("#%d: empty message", i)
		}
		ts.doJSON(http.MethodGet, "/healthz", nil, 200, nil)
		hs.Close()
	}
}
