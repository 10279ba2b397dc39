package api

import "time"

// Key-migration routes (RFD 126 phases, served by the agent next to the kv API):
//
//	GET  /v1/keymigrations                      → []KeyMigrationStatus (declared or recorded)
//	GET  /v1/keymigrations/{name}               → KeyMigrationStatus
//	POST /v1/keymigrations/{name}/advance       body = KeyMigrationRequest → KeyMigrationStatus
//	POST /v1/keymigrations/{name}/rollback      body = KeyMigrationRequest (to required) → KeyMigrationStatus
//
// A refused step is 409 with reason ReasonPhaseRefused and the reason in the message;
// an unknown migration is 404; a bad body 400. Nothing changes when a step is refused.
const PathKeyMigrations = "/v1/keymigrations"

// ReasonPhaseRefused (409): a key migration's advance or rollback was refused (a skipped
// phase, a member that does not support it or does not apply the current phase yet,
// the phase's work not done, deletion started); the message says why.
const ReasonPhaseRefused = "PhaseRefused"

// Phases of a key migration (Teleport RFD 126).
const (
	KeyPhaseOld     = 0 // old keys only
	KeyPhaseMirror  = 1 // writes to old and new keys, reads from old
	KeyPhaseReadNew = 2 // writes to both, reads from new with fallback to old
	KeyPhaseCopy    = 3 // as 2, plus a background copy of every old key to the new range
	KeyPhaseNew     = 4 // new keys only
	KeyPhaseDelete  = 5 // new keys only, plus a background delete of the old keys
	KeyPhaseMax     = KeyPhaseDelete
)

// KeyPhaseRecord is the replicated phase record of one key migration, stored under the
// reserved prefix. Every typed write of the resource compares its mod revision, so a
// phase switch and a write are totally ordered. Absent = phase 0.
//
//	{"name":"widgets-v2-keys","phase":3,"rollbackTo":null,
//	 "last":{"from":2,"to":3,"by":"alice@host","at":"2026-...","remote":"127.0.0.1:51234"}}
type KeyPhaseRecord struct {
	Name  string `json:"name"`
	Phase int    `json:"phase"`
	// RollbackTo is set while a rollback from phase 4 copies the new keys back to the
	// old ones: writes go to both keys again, reads come from the new keys only; once
	// the copy is done the phase becomes RollbackTo.
	RollbackTo *int             `json:"rollbackTo,omitempty"`
	Last       *PhaseTransition `json:"last,omitempty"`
	// Revision is the record's mod revision (set on read; 0 when absent).
	Revision int64 `json:"-"`
}

// PhaseTransition is who moved a key migration from one phase to another, and when.
type PhaseTransition struct {
	From   int       `json:"from"`
	To     int       `json:"to"`
	By     string    `json:"by,omitempty"`
	Remote string    `json:"remote,omitempty"`
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // "advance", "rollback", "rollback-done"
}

// KeyWork is the checkpoint of a key migration's background work (the copy of phase 3,
// the delete of phase 5, the reverse copy of a rollback from 4), stored under the
// reserved prefix apart from the phase record so checkpoints never disturb typed writes.
type KeyWork struct {
	Name string `json:"name"`
	// Kind is "copy", "delete" or "reverse"; Phase the phase (and rollback target) it
	// belongs to: a record of another phase is stale.
	Kind     string `json:"kind"`
	PhaseRev int64  `json:"phaseRevision"` // mod revision of the phase record it works under
	State    string `json:"state"`         // "Running", "Done"
	// Stage of a reverse copy: 0 copies new keys back, 1 deletes old keys whose new key
	// was deleted in phase 4.
	Stage        int    `json:"stage,omitempty"`
	ScanRevision int64  `json:"scanRevision,omitempty"`
	NextKey      []byte `json:"nextKey,omitempty"`
	Scanned      int64  `json:"scanned"`
	Written      int64  `json:"written"` // copied, deleted or copied back
	Skipped      int64  `json:"skipped"` // already there, or changed since the scan
	Total        int64  `json:"total"`   // keys of the scanned range when the pass began
	// Left is the exact number of keys the work still has to handle, counted at the end
	// of the last pass (copy: old keys with no new key; delete: old keys).
	Left             int64     `json:"left"`
	KeysPerSecond    float64   `json:"keysPerSecond,omitempty"`
	ETASeconds       float64   `json:"etaSeconds,omitempty"`
	Started          time.Time `json:"started,omitzero"`
	Updated          time.Time `json:"updated,omitzero"`
	Finished         time.Time `json:"finished,omitzero"`
	Revision         int64     `json:"-"`
	DeletionsStarted bool      `json:"deletionsStarted,omitempty"`

	// Progress holds the checkpoints KeysPerSecond is measured over (keys scanned at
	// each time, the last few seconds of them): a rate of wall-clock time, not of one
	// chunk's burst. ETASeconds is the time the pass needs at that rate, as of Updated.
	Progress []ProgressSample `json:"progress,omitempty"`
}

// KeyMigrationNode is what one member announces about a key migration.
type KeyMigrationNode struct {
	NodeID string `json:"nodeID"`
	// Phase is the phase the node applies (-1: it does not support the migration).
	Phase  int    `json:"phase"`
	Status string `json:"status"` // "ok", "unsupported", "lagging", "unknown"
}

// KeyMigrationStatus is GET /v1/keymigrations/{name}.
type KeyMigrationStatus struct {
	Name       string           `json:"name"`
	Resource   string           `json:"resource"`
	From       string           `json:"from"`
	To         string           `json:"to"`
	Phase      int              `json:"phase"`
	RollbackTo *int             `json:"rollbackTo,omitempty"`
	Last       *PhaseTransition `json:"last,omitempty"`
	Work       *KeyWork         `json:"work,omitempty"`
	// OldKeys and NewKeys count the keys of each range now (this node's state machine).
	OldKeys int64              `json:"oldKeys"`
	NewKeys int64              `json:"newKeys"`
	Nodes   []KeyMigrationNode `json:"nodes,omitempty"`
	// NextBlocked says why advance would be refused now ("" = it would be taken).
	NextBlocked string `json:"nextBlocked,omitempty"`
	Revision    int64  `json:"revision"`
}

// KeyMigrationRequest is the body of advance and rollback. To is the target phase
// (advance: optional, one above the current; rollback: required). By names who asks
// (recorded with the transition and logged).
type KeyMigrationRequest struct {
	To *int   `json:"to,omitempty"`
	By string `json:"by,omitempty"`
}
