package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
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
		{ErrUnauthorized, 401, api.ReasonUnauthorized},
		{ErrClientCertRequired, 401, api.ReasonClientCertRequired},
		{fsm.ErrCompacted, 410, api.ReasonResourceExpired},
		{&fsm.WatchError{Err: fsm.ErrSlowWatcher}, 429, api.ReasonSlowWatcher},
		{fsm.ErrWatchRestored, 503, api.ReasonRestored},
		{&expiredError{err: fsm.ErrCompacted, cont: "x"}, 410, api.ReasonResourceExpired},
		{ErrTooLarge, 413, api.ReasonTooLarge},
		{versions.ErrBadSchema, 400, api.ReasonBadSchema},
		{versions.ErrSchemaChange, 409, api.ReasonSchemaChangeRefused},
		{migrate.ErrPhaseRefused, 409, api.ReasonPhaseRefused},
		{migrate.ErrNoCommonVersion, 409, api.ReasonNoCommonVersion},
		{migrate.ErrNotRunning, 409, api.ReasonNotRunning},
		{migrate.ErrConflict, 409, api.ReasonConflict},
		{migrate.ErrBadSettings, 400, api.ReasonBadRequest},
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
