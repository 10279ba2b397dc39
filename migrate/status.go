package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// The migration records are the wire types of GET /v1/migrations (package kv/api), so
// that the Go client reads them without importing the migrator.
type (
	// Status is the replicated record of one resource's migration, under
	// StatusKey(resource).
	Status = api.MigrationStatus
	// State is where a resource's migration stands.
	State = api.MigrationState
	// Poison is an object the migrator cannot rewrite.
	Poison = api.Poison
	// Settings are the cluster-wide migrator settings, under SettingsKey.
	Settings = api.MigrationSettings
)

// States of a migration (see api.MigrationState).
const (
	StateWaiting   = api.MigrationWaiting
	StateRunning   = api.MigrationRunning
	StateSucceeded = api.MigrationSucceeded
	StateBlocked   = api.MigrationBlocked
	StateFailed    = api.MigrationFailed
	StateAborted   = api.MigrationAborted
	StateDryRun    = api.MigrationDryRun
)

// Errors of the control functions (Request, Abort, WriteSettings).
var (
	// ErrNoCommonVersion: a migration cannot start now (the members do not all write
	// one encoding version); the message says why.
	ErrNoCommonVersion = errors.New("migrate: no common encoding version to migrate into")
	// ErrNotRunning: Abort of a migration that is not running.
	ErrNotRunning = errors.New("migrate: no migration running")
	// ErrConflict: the record kept changing under the update (retry).
	ErrConflict = errors.New("migrate: migration record changed concurrently")
	// ErrBadSettings: settings that cannot be stored (rate 0).
	ErrBadSettings = errors.New("migrate: bad settings")
)

// maxPoison bounds the objects listed as impossible to migrate.
const maxPoison = 100

const statusPrefix = versions.SystemPrefix + "migrations/"

// StatusKey is where the migration status of resource ("group/name") is stored.
func StatusKey(resource string) string { return statusPrefix + resource }

// SettingsKey is where the cluster-wide Settings are stored (outside the status prefix).
const SettingsKey = versions.SystemPrefix + "migration-settings"

// ReadStatus reads the migration status of resource from view; nil when none.
func ReadStatus(view *fsm.View, resource string) (*Status, error) {
	kv, err := view.Get([]byte(StatusKey(resource)), 0)
	if errors.Is(err, fsm.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeStatus(kv)
}

func decodeStatus(kv fsm.KeyValue) (*Status, error) {
	var s Status
	if err := json.Unmarshal(kv.Value, &s); err != nil {
		return nil, fmt.Errorf("migrate: status %q: %w", kv.Key, err)
	}
	s.Revision = kv.ModRevision
	return &s, nil
}

// ListStatuses reads every migration record in view, ordered by resource: current
// migrations and finished ones, of resources this node serves or not.
func ListStatuses(view *fsm.View) ([]*Status, error) {
	prefix := []byte(statusPrefix)
	kvs, _, err := view.Range(prefix, fsm.PrefixEnd(prefix), 0, 0)
	if err != nil {
		return nil, err
	}
	out := make([]*Status, 0, len(kvs))
	for _, kv := range kvs {
		st, err := decodeStatus(kv)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// saveOp is the write of st, CAS on the record's revision prev (0: must not exist), as
// a compare and an op to put in a transaction. It stamps Updated and the conditions.
func saveOp(st *Status, now time.Time) (fsm.Compare, fsm.Op, error) {
	st.Updated = now
	setConditions(st, now)
	prev := st.Revision
	st.Revision = 0
	value, err := json.Marshal(st)
	st.Revision = prev
	if err != nil {
		return fsm.Compare{}, fsm.Op{}, err
	}
	key := []byte(StatusKey(st.Resource))
	return fsm.Compare{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: prev},
		fsm.Op{Type: fsm.OpPut, Key: key, Value: value}, nil
}

// putRecord applies one compare-and-swap write; ok is false on a conflict.
func putRecord(ctx context.Context, store Store, cmp fsm.Compare, op fsm.Op) (bool, error) {
	res, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Compares: []fsm.Compare{cmp}, Success: []fsm.Op{op}}})
	if err != nil {
		return false, err
	}
	if res.Err != nil {
		return false, res.Err
	}
	return res.Succeeded, nil
}

// save writes st when it differs from old (beyond timestamps and the rate), CAS on
// st.Revision, the revision old was read at (0: the record must not exist).
func (m *Migrator) save(ctx context.Context, st *Status, old *Status) error {
	if old != nil && old.Revision != 0 && sameStatus(st, old) {
		return nil
	}
	cmp, op, err := saveOp(st, time.Now().UTC())
	if err != nil {
		return err
	}
	ok, err := putRecord(ctx, m.cfg.Store, cmp, op)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w (aborted, or another leader); retrying", ErrConflict)
	}
	return nil
}

func sameStatus(a, b *Status) bool {
	x, y := *a, *b
	for _, s := range []*Status{&x, &y} {
		s.Updated, s.Revision, s.Conditions, s.ObjectsPerSecond, s.ETASeconds = time.Time{}, 0, nil, 0, 0
		s.Progress = nil
	}
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(bx, by)
}

// setConditions derives the conditions from st.State. A condition's
// lastTransitionTime moves only when its status flips:
//
//	Running → Aborted → Running → Succeeded
//	Running   True      False     True      False
//	Succeeded False     False     False     True
func setConditions(st *Status, now time.Time) {
	truth := map[string]bool{
		api.ConditionRunning:   st.State == StateRunning,
		api.ConditionSucceeded: st.State == StateSucceeded,
		api.ConditionFailed:    st.State == StateFailed,
		api.ConditionBlocked:   st.State == StateBlocked,
	}
	var out []api.MigrationCondition
	for _, typ := range []string{api.ConditionRunning, api.ConditionSucceeded, api.ConditionFailed, api.ConditionBlocked} {
		status := "False"
		if truth[typ] {
			status = "True"
		}
		c, ok := st.Condition(typ)
		if !ok || c.Status != status {
			c = api.MigrationCondition{Type: typ, Status: status, LastTransitionTime: now}
		}
		c.Reason, c.Message = string(st.State), ""
		if truth[typ] {
			c.Message = st.Message
		}
		out = append(out, c)
	}
	st.Conditions = out
}

// ReadSettings reads the cluster-wide settings from view; nil when never written.
func ReadSettings(view *fsm.View) (*Settings, error) {
	kv, err := view.Get([]byte(SettingsKey), 0)
	if errors.Is(err, fsm.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Settings
	if err := json.Unmarshal(kv.Value, &s); err != nil {
		return nil, fmt.Errorf("migrate: settings: %w", err)
	}
	return &s, nil
}

// ValidateSettings names a bad field.
func ValidateSettings(s Settings) error {
	if s.Rate == 0 || s.Rate < -1 {
		return fmt.Errorf("%w: rate %d: want objects per second > 0, or -1 for unlimited (turn auto off to stop "+
			"automatic migrations)", ErrBadSettings, s.Rate)
	}
	return nil
}

// WriteSettings stores s as the cluster-wide settings; the leader's migrator applies
// them at its next step.
func WriteSettings(ctx context.Context, store Store, s Settings) error {
	if err := ValidateSettings(s); err != nil {
		return err
	}
	value, _ := json.Marshal(s)
	res, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
		Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(SettingsKey), Value: value}}}})
	if err != nil {
		return err
	}
	return res.Err
}
