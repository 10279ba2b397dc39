package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"sort"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// Errors of key-migration transitions.
var (
	// ErrPhaseRefused: an advance or rollback that the rules refuse now; the message
	// says why. Nothing was changed.
	ErrPhaseRefused = errors.New("migrate: key migration step refused")
)

// KeyMember is one member of the cluster as a key-migration transition sees it: the
// phase it announces it applies for each key migration it supports.
type KeyMember struct {
	ID      string
	Release string
	// Known: the member's metadata is known (it announces what it supports); an
	// unknown member blocks every advance.
	Known bool
	// Alive: gossip sees the member alive; a failed member cannot confirm anything.
	Alive bool
	// Phases maps each key migration the member supports to the phase it applies.
	Phases map[string]int
}

// Transition is who asks for a phase change.
type Transition struct {
	By, Remote string
}

// AdvanceBlocked says why key migration k cannot advance from rec to phase to now
// ("" = it can), from view (the same linearizable view as rec and work) and the
// members' announcements.
//
//   - a rollback from phase 4 is copying back: wait for it;
//   - to must be rec.Phase+1 (a skipped phase is refused; 5 is the last);
//   - every member supports k and applies rec.Phase (members nil: unknown, refused);
//   - 0 → 1 needs an empty new range; 3 → 4 needs the copy done with zero old keys
//     that have no new key, counted exactly now.
func AdvanceBlocked(view *fsm.View, k *versions.KeyMigration, rec *api.KeyPhaseRecord, members []KeyMember, to int) string {
	switch {
	case rec.RollbackTo != nil:
		return fmt.Sprintf("a rollback to phase %d is copying the new keys back to the old ones", *rec.RollbackTo)
	case rec.Phase >= api.KeyPhaseMax:
		return fmt.Sprintf("phase %d is the last phase", rec.Phase)
	case to <= rec.Phase:
		return fmt.Sprintf("phase %d is not after the current phase %d (use rollback)", to, rec.Phase)
	case to != rec.Phase+1:
		return fmt.Sprintf("phase %d → %d skips phase %d: advance one phase at a time", rec.Phase, to, rec.Phase+1)
	}
	if why := membersBlock(k.Name, rec.Phase, members); why != "" {
		return why
	}
	switch rec.Phase {
	case api.KeyPhaseOld:
		if n := countRange(view, []byte(k.To)); n > 0 {
			return fmt.Sprintf("the new range %q holds %d keys already; phase 1 starts from an empty new range", k.To, n)
		}
	case api.KeyPhaseCopy:
		if left := oldOnly(view, k); left > 0 {
			return fmt.Sprintf("the copy has %d old keys left without a new key", left)
		}
	}
	return ""
}

// membersBlock says which member keeps the cluster from leaving phase.
func membersBlock(name string, phase int, members []KeyMember) string {
	if members == nil {
		return "the members' support is unknown: gossip is off and the cluster has more than one member, so " +
			"none can announce key migration " + name + " and the phase it applies; start every agent with gossip " +
			"(-gossip-addr, or -bootstrap-expect) and advance again"
	}
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	for _, m := range members {
		p, ok := m.Phases[name]
		switch {
		case !m.Known:
			return fmt.Sprintf("node %s: its metadata is unknown", m.ID)
		case !m.Alive:
			return fmt.Sprintf("node %s is not alive (gossip), so it cannot confirm phase %d", m.ID, phase)
		case !ok:
			return fmt.Sprintf("node %s (release %s) does not support key migration %s", m.ID, m.Release, name)
		case p != phase:
			return fmt.Sprintf("node %s applies phase %d, not the current phase %d yet", m.ID, p, phase)
		}
	}
	return ""
}

// MemberStatus is how each member stands for key migration name at phase.
func MemberStatus(name string, phase int, members []KeyMember) []api.KeyMigrationNode {
	var out []api.KeyMigrationNode
	for _, m := range members {
		n := api.KeyMigrationNode{NodeID: m.ID, Phase: -1, Status: "ok"}
		p, ok := m.Phases[name]
		switch {
		case !m.Known:
			n.Status = "unknown"
		case !m.Alive:
			n.Status = "failed"
		case !ok:
			n.Status = "unsupported"
		case p != phase:
			n.Phase, n.Status = p, "lagging"
		default:
			n.Phase = p
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}

// countRange counts the keys under prefix in view.
func countRange(view *fsm.View, prefix []byte) int64 {
	var n int64
	start, end := prefix, fsm.PrefixEnd(prefix)
	for {
		kvs, next, err := view.Range(start, end, 0, 1000)
		if err != nil {
			return n
		}
		n += int64(len(kvs))
		if next == nil {
			return n
		}
		start = next
	}
}

// oldOnly counts the old keys of k that have no new key, exactly, in view.
func oldOnly(view *fsm.View, k *versions.KeyMigration) int64 {
	var n int64
	start, end := []byte(k.From), fsm.PrefixEnd([]byte(k.From))
	for {
		kvs, next, err := view.Range(start, end, 0, 1000)
		if err != nil {
			return n + 1 // unknown: never zero
		}
		for _, kv := range kvs {
			if _, err := view.Get(k.NewKey(kv.Key), 0); err != nil {
				n++
			}
		}
		if next == nil {
			return n
		}
		start = next
	}
}

// CountKeys returns the number of keys in k's old and new ranges in view.
func CountKeys(view *fsm.View, k *versions.KeyMigration) (old, nw int64) {
	return countRange(view, []byte(k.From)), countRange(view, []byte(k.To))
}

// Advance moves key migration k one phase forward (to: the target, which must be the
// next phase; nil: the next phase), as a compare-and-swap on the phase record, if
// AdvanceBlocked allows it; otherwise ErrPhaseRefused with the reason.
func Advance(ctx context.Context, store Store, k *versions.KeyMigration, to *int, members []KeyMember, t Transition) (rec *api.KeyPhaseRecord, err error) {
	ctx, span := startSpan(ctx, tracer(nil), spanKeyAdvance, attribute.String("keel.key_migration", k.Name))
	defer func() {
		if rec != nil {
			span.SetAttributes(attribute.Int("keel.phase", rec.Phase))
		}
		endSpan(span, err)
	}()
	return advance(ctx, store, k, to, members, t)
}

// advance is Advance, inside its span.
func advance(ctx context.Context, store Store, k *versions.KeyMigration, to *int, members []KeyMember, t Transition) (*api.KeyPhaseRecord, error) {
	view, err := store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	rec, err := versions.ReadKeyPhase(view, k.Name)
	if err != nil {
		return nil, err
	}
	target := rec.Phase + 1
	if to != nil {
		target = *to
	}
	if why := AdvanceBlocked(view, k, rec, members, target); why != "" {
		return nil, fmt.Errorf("%w: key migration %s: %s", ErrPhaseRefused, k.Name, why)
	}
	next := *rec
	next.Phase = target
	next.Last = &api.PhaseTransition{From: rec.Phase, To: target, By: t.By, Remote: t.Remote, At: time.Now().UTC(), Kind: "advance"}
	// The 3 → 4 count holds until the switch: in phase 3 every write reaches both
	// ranges, so no old-only key can appear; the phase compare fences the rest.
	if err := putPhase(ctx, store, rec, &next, nil); err != nil {
		return nil, err
	}
	return &next, nil
}

// Rollback moves key migration k back to phase to: at once from phases 1–3 (the old
// keys are still written; a rollback to 0 deletes the new range in the same
// transaction, so a later phase 1 starts from nothing stale); from 4 (and from 5 before
// any old key was deleted) it first copies the new keys back to the old ones (phase 4
// with RollbackTo set; the leader's worker switches the phase when the copy is done),
// refused when k's ops lose values; from 5 once deletion started it is refused.
func Rollback(ctx context.Context, store Store, k *versions.KeyMigration, to int, t Transition) (rec *api.KeyPhaseRecord, err error) {
	ctx, span := startSpan(ctx, tracer(nil), spanKeyRollPhase, attribute.String("keel.key_migration", k.Name),
		attribute.Int("keel.rollback_to", to))
	defer func() {
		if rec != nil {
			span.SetAttributes(attribute.Int("keel.phase", rec.Phase))
		}
		endSpan(span, err)
	}()
	return rollback(ctx, store, k, to, t)
}

// rollback is Rollback, inside its span.
func rollback(ctx context.Context, store Store, k *versions.KeyMigration, to int, t Transition) (*api.KeyPhaseRecord, error) {
	view, err := store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	rec, err := versions.ReadKeyPhase(view, k.Name)
	if err != nil {
		return nil, err
	}
	work, err := versions.ReadKeyWork(view, k.Name)
	if err != nil {
		return nil, err
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: key migration %s: %s", ErrPhaseRefused, k.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case to < 0 || to >= rec.Phase:
		return nil, refuse("phase %d is not before the current phase %d", to, rec.Phase)
	case rec.RollbackTo != nil:
		return nil, refuse("a rollback to phase %d is already copying the new keys back", *rec.RollbackTo)
	case rec.Phase == api.KeyPhaseDelete && work != nil && work.Kind == workDelete && work.PhaseRev == rec.Revision &&
		work.DeletionsStarted:
		return nil, refuse("phase 5 has started deleting the old keys (%d deleted); they cannot come back", work.Written)
	case rec.Phase >= api.KeyPhaseNew && to < api.KeyPhaseNew && k.Lossy():
		return nil, refuse("its ops drop fields, so the new keys cannot be copied back to the old ones without loss")
	}
	next := *rec
	next.Last = &api.PhaseTransition{From: rec.Phase, To: to, By: t.By, Remote: t.Remote, At: time.Now().UTC(), Kind: "rollback"}
	var extra []fsm.Op
	switch {
	case rec.Phase <= api.KeyPhaseCopy:
		next.Phase = to
		if to == api.KeyPhaseOld {
			extra = append(extra, deleteNewRange(k))
		}
	case to == api.KeyPhaseNew: // from 5, nothing deleted yet
		next.Phase = to
	default:
		next.Phase = api.KeyPhaseNew
		next.RollbackTo = &to
	}
	// The work record's revision fences a delete chunk racing this rollback.
	workRev := int64(0)
	if work != nil {
		workRev = work.Revision
	}
	cmps := []fsm.Compare{{Key: []byte(versions.KeyWorkKey(k.Name)), Target: fsm.TargetModRevision,
		Result: fsm.CompareEqual, Int: workRev}}
	if err := putPhase(ctx, store, rec, &next, cmps, extra...); err != nil {
		return nil, err
	}
	return &next, nil
}

func deleteNewRange(k *versions.KeyMigration) fsm.Op {
	return fsm.Op{Type: fsm.OpDeleteRange, Key: []byte(k.To), End: fsm.PrefixEnd([]byte(k.To))}
}

// putPhase stores next over rec (compare-and-swap on rec's revision and cmps), with
// extra ops in the same transaction. A lost race is ErrConflict.
func putPhase(ctx context.Context, store Store, rec, next *api.KeyPhaseRecord, cmps []fsm.Compare, extra ...fsm.Op) error {
	value, err := json.Marshal(next)
	if err != nil {
		return err
	}
	key := []byte(versions.KeyPhaseKey(next.Name))
	txn := &fsm.Txn{Compares: append([]fsm.Compare{{Key: key, Target: fsm.TargetModRevision,
		Result: fsm.CompareEqual, Int: rec.Revision}}, cmps...),
		Success: append([]fsm.Op{{Type: fsm.OpPut, Key: key, Value: value}}, extra...)}
	res, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	if !res.Succeeded {
		return fmt.Errorf("%w: key migration %s changed during the step; look again", ErrConflict, next.Name)
	}
	next.Revision = res.Revision
	return nil
}
