package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// Request asks for the migration of resource ("group/name") now: the leader's
// migrator starts it at its next round even when automatic migrations are off, or
// resumes an aborted one from its checkpoint. A running migration is left as it is.
// ErrNoCommonVersion (wrapped, with the reason) when the members do not all write one
// version yet. Any node may call it: the record is updated by compare-and-swap
// through Raft.
func Request(ctx context.Context, store Store, resource string) (*Status, error) {
	return update(ctx, store, resource, func(st *Status, sv *versions.StorageVersion) error {
		if st.State == StateRunning {
			return errUnchanged
		}
		if target, why := migrationTarget(sv); target == "" {
			return fmt.Errorf("%w: %s", ErrNoCommonVersion, why)
		}
		st.Requested = true
		st.Message = "requested by an operator; the leader starts it within a second"
		if st.State == StateAborted {
			st.Message = "resume requested by an operator; the leader resumes from the checkpoint within a second"
		}
		return nil
	})
}

// Abort stops the running migration of resource: its state becomes Aborted and its
// checkpoint (scan revision, next key, counts) is kept, so Request resumes it. A
// chunk the leader is rewriting at that moment fails its compare-and-swap on the
// record and is not written. ErrNotRunning when none runs or is requested.
func Abort(ctx context.Context, store Store, resource string) (*Status, error) {
	return update(ctx, store, resource, func(st *Status, _ *versions.StorageVersion) error {
		if st.State != StateRunning && !st.Requested {
			return fmt.Errorf("%w for %s (state %s)", ErrNotRunning, resource, st.State)
		}
		if st.State != StateRunning {
			st.Requested = false
			return nil // a request not picked up yet: withdrawn
		}
		st.State, st.Requested, st.ObjectsPerSecond, st.ETASeconds = StateAborted, false, 0, 0
		st.Message = fmt.Sprintf("aborted by an operator after %d of %d objects of pass %d; "+
			"POST /v1/migrations resumes from the checkpoint", st.PassScanned, st.Total, st.Pass)
		return nil
	})
}

var errUnchanged = errors.New("unchanged")

// update applies change to resource's record by compare-and-swap, retrying when the
// leader's migrator wrote it meanwhile.
func update(ctx context.Context, store Store, resource string, change func(*Status, *versions.StorageVersion) error) (*Status, error) {
	for attempt := 0; attempt < 10; attempt++ {
		view, err := store.View(ctx, fsm.Linearizable)
		if err != nil {
			return nil, err
		}
		st, err := ReadStatus(view, resource)
		if err != nil {
			return nil, err
		}
		if st == nil {
			st = &Status{Resource: resource, State: StateWaiting}
		}
		sv, err := versions.StorageVersionAt(view, resource)
		if err != nil {
			return nil, err
		}
		next := *st
		switch err := change(&next, sv); {
		case errors.Is(err, errUnchanged):
			return st, nil
		case err != nil:
			return nil, err
		}
		cmp, op, err := saveOp(&next, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		ok, err := putRecord(ctx, store, cmp, op)
		if err != nil {
			return nil, err
		}
		if ok {
			return &next, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
	return nil, ErrConflict
}
