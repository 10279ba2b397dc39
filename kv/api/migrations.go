package api

import "time"

// Storage-version migration routes (served by the agent next to the kv API):
//
//	GET    /v1/migrations                        → []MigrationStatus (current and finished)
//	POST   /v1/migrations                        body = MigrationRequest → 202 MigrationStatus
//	DELETE /v1/migrations/{group}/{resource}     abort (checkpoint kept) → MigrationStatus
//	GET    /v1/migrations/settings               → MigrationSettings
//	PUT    /v1/migrations/settings               body = MigrationSettings → MigrationSettings
const (
	PathMigrations        = "/v1/migrations"
	PathMigrationSettings = "/v1/migrations/settings"
)

// Reasons of the migration routes.
const (
	// ReasonNoCommonVersion (409): a migration cannot start now: the members do not
	// agree on one encoding version, or some member still writes another one.
	ReasonNoCommonVersion = "NoCommonVersion"
	// ReasonNotRunning (409): DELETE of a migration that is not running.
	ReasonNotRunning = "NotRunning"
)

// MigrationState is where one resource's migration stands.
type MigrationState string

// Migration states.
const (
	// MigrationWaiting: the members do not agree on one encoding version yet, or
	// automatic migrations are off and none was started.
	MigrationWaiting MigrationState = "Waiting"
	// MigrationRunning: objects outside the target version are being rewritten.
	MigrationRunning MigrationState = "Running"
	// MigrationSucceeded: every stored object is in the target version.
	MigrationSucceeded MigrationState = "Succeeded"
	// MigrationBlocked: what is left cannot be converted (see Poison).
	MigrationBlocked MigrationState = "Blocked"
	// MigrationFailed: a running migration lost its target (the members stopped
	// agreeing on one encoding version); it starts again once they agree.
	MigrationFailed MigrationState = "Failed"
	// MigrationAborted: an operator aborted it; the checkpoint is kept and a POST
	// resumes from it.
	MigrationAborted MigrationState = "Aborted"
	// MigrationDryRun: a dry run finished; Migrated counts what it would have rewritten.
	MigrationDryRun MigrationState = "DryRunComplete"
)

// Condition types of a MigrationStatus (those of Kubernetes' StorageVersionMigration,
// plus Blocked).
const (
	ConditionRunning   = "Running"
	ConditionSucceeded = "Succeeded"
	ConditionFailed    = "Failed"
	ConditionBlocked   = "Blocked"
)

// MigrationCondition is one condition of a migration. LastTransitionTime moves only
// when Status changes.
type MigrationCondition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // "True" or "False"
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
}

// Poison is an object the migrator cannot rewrite (its stored form does not decode or
// convert); it is listed once, not retried in a loop.
type Poison struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// MigrationStatus is the replicated record of one resource's migration, as stored
// under the reserved prefix and served by GET /v1/migrations.
//
//	{"resource":"apps/widgets","state":"Running","target":"v2","scanRevision":812,
//	 "nextKey":"L3JlZ2lzdHJ5L...","pass":1,"passScanned":400,"scanned":400,
//	 "migrated":380,"skipped":20,"remaining":{"v1":600},"total":1000,
//	 "objectsPerSecond":512.3,"etaSeconds":1.2,"conditions":[...]}
type MigrationStatus struct {
	Resource string         `json:"resource"`
	State    MigrationState `json:"state"`
	// Target is the version objects are rewritten into.
	Target string `json:"target,omitempty"`
	// ScanRevision and NextKey are the checkpoint: the pass reads at ScanRevision and
	// resumes at NextKey.
	ScanRevision int64  `json:"scanRevision,omitempty"`
	NextKey      []byte `json:"nextKey,omitempty"`
	Pass         int    `json:"pass,omitempty"`
	// StorageVersionRevision is the mod revision of the resource's StorageVersion
	// record when the pass began; every rewrite is conditional on it.
	StorageVersionRevision int64 `json:"storageVersionRevision,omitempty"`
	// CheckedRevision is the revision of the last exact count that ended a pass.
	CheckedRevision int64 `json:"checkedRevision,omitempty"`
	// PassScanned counts the objects this pass has scanned (progress: out of Total).
	PassScanned int64 `json:"passScanned,omitempty"`
	// Counts of this migration (all passes).
	Scanned  int64 `json:"scanned"`
	Migrated int64 `json:"migrated"`
	// Skipped: changed or deleted since the scan's revision (the newer write is in the
	// target version already).
	Skipped int64    `json:"skipped"`
	Poison  []Poison `json:"poison,omitempty"`
	// Remaining counts stored objects per version other than Target, exactly, as of
	// the pass's start, less those rewritten since.
	Remaining map[string]int64 `json:"remaining,omitempty"`
	// Total is the number of the resource's objects when the pass began.
	Total int64 `json:"total"`
	// ObjectsPerSecond is the scan rate over the last seconds of wall-clock time (from
	// Progress); ETASeconds the time the pass needs at that rate to scan the rest, as of
	// Updated (both 0 unless Running, and while less than a second was measured).
	ObjectsPerSecond float64 `json:"objectsPerSecond,omitempty"`
	ETASeconds       float64 `json:"etaSeconds,omitempty"`
	// Progress holds the checkpoints the rate is measured over: objects scanned (all
	// passes) at each time, the last few seconds of them.
	Progress []ProgressSample `json:"progress,omitempty"`
	// Reason says why the migration started, e.g. "storage version hash changed from
	// X (apps/v1) to Y (apps/v2)".
	Reason string `json:"reason,omitempty"`
	DryRun bool   `json:"dryRun,omitempty"`
	// Requested: an operator asked for a migration now (POST); the leader starts or
	// resumes it even when automatic migrations are off.
	Requested  bool                 `json:"requested,omitempty"`
	Message    string               `json:"message,omitempty"`
	Conditions []MigrationCondition `json:"conditions,omitempty"`
	Started    time.Time            `json:"started,omitzero"`
	Updated    time.Time            `json:"updated,omitzero"`
	Finished   time.Time            `json:"finished,omitzero"`
	// Revision is the record's mod revision (set on read; the CAS precondition).
	Revision int64 `json:"-"`
}

// ProgressSample is one checkpoint of a migration's work: Done objects (or keys) were
// handled by time At.
type ProgressSample struct {
	At   time.Time `json:"at"`
	Done int64     `json:"done"`
}

// RemainingTotal is the number of stored objects not yet in the target version.
func (s *MigrationStatus) RemainingTotal() int64 {
	var n int64
	for _, c := range s.Remaining {
		n += c
	}
	return n
}

// Condition returns the condition of type t, if set.
func (s *MigrationStatus) Condition(t string) (MigrationCondition, bool) {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return MigrationCondition{}, false
}

// MigrationRequest is the body of POST /v1/migrations: start (or resume) the
// migration of one resource now.
type MigrationRequest struct {
	Group    string `json:"group"`
	Resource string `json:"resource"`
}

// MigrationSettings are the cluster-wide migrator settings, replicated through Raft.
// Until first written they come from the leader's -no-migrate and -migrate-rate flags.
type MigrationSettings struct {
	// Auto: the leader starts a migration by itself once every member writes the
	// common encoding version. Off, only POST /v1/migrations starts one (a running
	// migration goes on).
	Auto bool `json:"auto"`
	// Rate bounds rewrites per second; -1 is unlimited. 0 is refused.
	Rate int `json:"rate"`
}
