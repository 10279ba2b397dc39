package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"slices"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// Background work of key migrations, run by the leader's migrator with the same
// machinery as storage-version migrations: chunked scans at one revision, a
// compare-and-swap per key, the checkpoint (api.KeyWork, its own record) written in the
// chunk's transaction, and the cluster-wide rate.
//
//	kind     phase                   per scanned key                       done when
//	copy     3                       old key with no new key → put new     no old key lacks a new key
//	delete   5                       old key → delete                      the old range is empty
//	reverse  4 with RollbackTo       stage 0: new key newer than the old   every old key equals its new
//	                                 key → put old (inverse ops);          key; then the phase becomes
//	                                 stage 1: old key without a new key    RollbackTo
//	                                 → delete
//
// Every chunk's transaction compares the phase record (the work belongs to that phase),
// the work record (no other leader wrote it since) and, per key, the mod revisions the
// decision was made on: the copy never overwrites a new key a client wrote, the delete
// never removes an old key that changed since the scan.
const (
	workCopy    = "copy"
	workDelete  = "delete"
	workReverse = "reverse"
	workRunning = "Running"
	workDone    = "Done"
	// keyChunk bounds one chunk: two compares per key, plus the phase and work records.
	keyChunk = (fsm.MaxTxnOps - 2) / 2
)

// errKeyWorkMoved: the phase or work record changed under a chunk (a transition, or
// another leader); the next step starts from what is stored.
var errKeyWorkMoved = errors.New("migrate: key migration record changed during the chunk")

// workKind is the background work of a phase record ("" = none).
func workKind(rec *api.KeyPhaseRecord) string {
	switch {
	case rec.Phase == api.KeyPhaseCopy:
		return workCopy
	case rec.Phase == api.KeyPhaseDelete:
		return workDelete
	case rec.Phase == api.KeyPhaseNew && rec.RollbackTo != nil:
		return workReverse
	}
	return ""
}

// scanRange is the prefix a work's current stage scans.
func scanRange(k *versions.KeyMigration, w *api.KeyWork) []byte {
	if w.Kind == workReverse && w.Stage == 0 {
		return []byte(k.To)
	}
	return []byte(k.From)
}

// stepKeyMigrations steps the work of every declared key migration; busy: more is
// waiting.
func (m *Migrator) stepKeyMigrations(ctx context.Context) (busy bool) {
	for _, k := range m.schema.Load().KeyMigrations() {
		m.autoAdvance(ctx, k)
		more, err := m.KeyStep(ctx, k)
		if err != nil && ctx.Err() == nil && !errors.Is(err, errKeyWorkMoved) {
			m.log.Warn("key migration step failed", "migration", k.Name, "error", err)
		}
		busy = busy || more || errors.Is(err, errKeyWorkMoved)
	}
	return busy
}

// autoAdvance takes the next phase of an "advance: auto" migration when the rules
// allow it (AdvanceBlocked) and the current phase has lasted k.MinDwell; it stops
// before phase 5 (deleting the old keys cannot be undone) unless k.AutoFinalize.
func (m *Migrator) autoAdvance(ctx context.Context, k *versions.KeyMigration) {
	if !k.Auto || m.cfg.KeyMembers == nil {
		return
	}
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return
	}
	rec, err := versions.ReadKeyPhase(view, k.Name)
	if err != nil || rec.Phase >= api.KeyPhaseMax {
		return
	}
	if rec.Last != nil && time.Since(rec.Last.At) < k.MinDwell {
		return
	}
	if rec.Phase+1 == api.KeyPhaseDelete && !k.AutoFinalize {
		return // irreversible: an operator's advance (or autoFinalize: true) takes it
	}
	members := m.cfg.KeyMembers()
	if AdvanceBlocked(view, k, rec, members, rec.Phase+1) != "" {
		return
	}
	next, err := Advance(ctx, m.cfg.Store, k, nil, members, Transition{By: "auto (leader)"})
	if err != nil {
		m.log.Debug("automatic key migration advance not taken", "migration", k.Name, "error", err)
		return
	}
	m.log.Info("key migration phase changed", "migration", k.Name, "step", "advance", "from", rec.Phase,
		"to", next.Phase, "by", "auto (leader)", "dwell", k.MinDwell)
}

// KeyStep advances k's background work by at most one chunk and records where it
// stands; more: the caller steps again without pausing. Only the leader should call it;
// a stale leader's write fails its compare-and-swap.
func (m *Migrator) KeyStep(ctx context.Context, k *versions.KeyMigration) (more bool, err error) {
	ctx, span := startSpan(ctx, m.tracer, spanKeyStep, attribute.String("keel.key_migration", k.Name))
	defer func() {
		span.SetAttributes(attribute.Bool("keel.more", more))
		endSpan(span, err)
	}()
	return m.keyStep(ctx, k)
}

// keyStep is KeyStep, inside its span.
func (m *Migrator) keyStep(ctx context.Context, k *versions.KeyMigration) (more bool, err error) {
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return false, err
	}
	rec, err := versions.ReadKeyPhase(view, k.Name)
	if err != nil {
		return false, err
	}
	work, err := versions.ReadKeyWork(view, k.Name)
	if err != nil {
		return false, err
	}
	kind := workKind(rec)
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("keel.phase", rec.Phase), attribute.String("keel.work", kind))
	if kind == "" {
		return false, nil
	}
	if work == nil || work.Kind != kind || work.PhaseRev != rec.Revision {
		prev := int64(0)
		if work != nil {
			prev = work.Revision
		}
		w := &api.KeyWork{Name: k.Name, Kind: kind, PhaseRev: rec.Revision, State: workRunning,
			ScanRevision: view.Revision(), Started: time.Now().UTC(), Revision: prev}
		w.Progress = observe(nil, 0, w.Started)
		w.Total = countRange(view, scanRange(k, w))
		m.log.Info("key migration work started", "migration", k.Name, "work", kind, "phase", rec.Phase, "keys", w.Total)
		return true, m.saveWork(ctx, rec, w, nil)
	}
	switch {
	case work.State == workDone && kind == workReverse:
		return true, m.finishRollback(ctx, k, rec, work)
	case work.State == workDone:
		return false, nil
	case work.ScanRevision == 0:
		return true, m.endKeyPass(ctx, view, k, rec, work)
	}
	return true, m.keyChunk(ctx, view, k, rec, work)
}

// endKeyPass counts exactly what the work has left (in view, after the pass's last
// chunk): none ends the stage (or the work), some starts another pass.
func (m *Migrator) endKeyPass(ctx context.Context, view *fsm.View, k *versions.KeyMigration, rec *api.KeyPhaseRecord, w *api.KeyWork) (err error) {
	ctx, span := startSpan(ctx, m.tracer, spanKeyPassEnd, keyAttrs(k, rec, w)...)
	defer func() { endSpan(span, err) }()
	next := *w
	next.Left = keysLeft(view, k, w)
	next.KeysPerSecond, next.ETASeconds = 0, 0
	switch {
	case next.Left == 0 && w.Kind == workReverse && w.Stage == 0:
		next.Stage, next.ScanRevision, next.NextKey = 1, view.Revision(), nil
		next.Total = countRange(view, []byte(k.From))
	case next.Left == 0:
		next.State, next.Finished, next.Progress = workDone, time.Now().UTC(), nil
		m.log.Info("key migration work done", "migration", k.Name, "work", w.Kind, "written", w.Written,
			"skipped", w.Skipped)
	default:
		next.ScanRevision, next.NextKey = view.Revision(), nil
		next.Total = countRange(view, scanRange(k, &next))
	}
	return m.saveWork(ctx, rec, &next, nil)
}

// keysLeft counts exactly the keys w's current stage still has to handle in view.
func keysLeft(view *fsm.View, k *versions.KeyMigration, w *api.KeyWork) int64 {
	switch {
	case w.Kind == workCopy:
		return oldOnly(view, k)
	case w.Kind == workDelete:
		return countRange(view, []byte(k.From))
	}
	var n int64
	forEach(view, scanRange(k, w), func(kv fsm.KeyValue) {
		if w.Stage == 0 {
			if old, err := view.Get(k.OldKey(kv.Key), 0); err != nil || old.ModRevision < kv.ModRevision {
				n++
			}
		} else if _, err := view.Get(k.NewKey(kv.Key), 0); err != nil {
			n++
		}
	})
	return n
}

// forEach calls fn for every key under prefix in view (latest revision).
func forEach(view *fsm.View, prefix []byte, fn func(fsm.KeyValue)) {
	start, end := prefix, fsm.PrefixEnd(prefix)
	for {
		kvs, next, err := view.Range(start, end, 0, 1000)
		if err != nil {
			return
		}
		for _, kv := range kvs {
			fn(kv)
		}
		if next == nil {
			return
		}
		start = next
	}
}

// keyWrite is one key's change in a chunk, with the compares it was decided on.
type keyWrite struct {
	op   fsm.Op
	cmps []fsm.Compare
}

func modIs(key []byte, rev int64) fsm.Compare {
	return fsm.Compare{Key: key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: rev}
}

// plan decides what w does with one scanned key kv, from the latest state in view
// (nil: nothing to do).
func (m *Migrator) plan(view *fsm.View, k *versions.KeyMigration, w *api.KeyWork, kv fsm.KeyValue) *keyWrite {
	get := func(key []byte) (fsm.KeyValue, bool) {
		cur, err := view.Get(key, 0)
		return cur, err == nil
	}
	switch {
	case w.Kind == workCopy:
		nk := k.NewKey(kv.Key)
		if _, ok := get(nk); ok {
			return nil // written through the mirror already
		}
		value, err := k.ToNew(kv.Value)
		if err != nil {
			m.log.Warn("key migration: object cannot be copied", "key", string(kv.Key), "error", err)
			return nil
		}
		return &keyWrite{op: fsm.Op{Type: fsm.OpPut, Key: nk, Value: value, Encoding: kv.Encoding},
			cmps: []fsm.Compare{modIs(kv.Key, kv.ModRevision), modIs(nk, 0)}}
	case w.Kind == workDelete:
		return &keyWrite{op: fsm.Op{Type: fsm.OpDelete, Key: kv.Key}, cmps: []fsm.Compare{modIs(kv.Key, kv.ModRevision)}}
	case w.Stage == 0: // reverse: kv is a new key
		ok := k.OldKey(kv.Key)
		old, found := get(ok)
		if found && old.ModRevision >= kv.ModRevision {
			return nil // mirrored since, or copied back already
		}
		value, err := k.ToOld(kv.Value)
		if err != nil {
			m.log.Warn("key migration: object cannot be copied back", "key", string(kv.Key), "error", err)
			return nil
		}
		return &keyWrite{op: fsm.Op{Type: fsm.OpPut, Key: ok, Value: value, Encoding: kv.Encoding},
			cmps: []fsm.Compare{modIs(kv.Key, kv.ModRevision), modIs(ok, old.ModRevision)}}
	default: // reverse stage 1: kv is an old key
		nk := k.NewKey(kv.Key)
		if _, ok := get(nk); ok {
			return nil
		}
		return &keyWrite{op: fsm.Op{Type: fsm.OpDelete, Key: kv.Key},
			cmps: []fsm.Compare{modIs(kv.Key, kv.ModRevision), modIs(nk, 0)}}
	}
}

// keyChunk scans the next chunk of w's pass at its revision and applies what plan
// decides, with the checkpoint, in one transaction.
func (m *Migrator) keyChunk(ctx context.Context, view *fsm.View, k *versions.KeyMigration, rec *api.KeyPhaseRecord, w *api.KeyWork) (err error) {
	ctx, span := startSpan(ctx, m.tracer, spanKeyChunk, keyAttrs(k, rec, w)...)
	var scanned, writes int
	defer func() {
		span.SetAttributes(attribute.Int("keel.scanned", scanned), attribute.Int("keel.writes", writes))
		endSpan(span, err)
	}()
	prefix := scanRange(k, w)
	start := prefix
	if len(w.NextKey) > 0 {
		start = w.NextKey
	}
	next := *w
	limit := min(m.cfg.Chunk, keyChunk)
	kvs, nextKey, err := view.Range(start, fsm.PrefixEnd(prefix), w.ScanRevision, limit)
	if errors.Is(err, fsm.ErrCompacted) {
		// As the migrator does (KEP-365's inconsistent continue): what changed since
		// was written under this phase, so the latest revision misses nothing.
		next.ScanRevision = view.Revision()
		kvs, nextKey, err = view.Range(start, fsm.PrefixEnd(prefix), next.ScanRevision, limit)
	}
	if err != nil {
		return err
	}
	var todo []keyWrite
	for _, kv := range kvs {
		next.Scanned++
		if kw := m.plan(view, k, w, kv); kw != nil {
			todo = append(todo, *kw)
		} else {
			next.Skipped++
		}
	}
	next.NextKey = nextKey
	if nextKey == nil {
		next.ScanRevision = 0 // scanned: the next step counts what is left
	}
	scanned, writes = len(kvs), len(todo)
	if err := m.wait(ctx, len(todo)); err != nil {
		return err
	}
	updateKeyRate(&next, time.Now()) // after the wait: the rate the limit allows
	return m.saveWork(ctx, rec, &next, todo)
}

// updateKeyRate adds the checkpoint of next (keys scanned) at now and sets the rate
// over the last seconds (see progress.go) and the ETA of the pass.
func updateKeyRate(next *api.KeyWork, now time.Time) {
	next.Progress = observe(next.Progress, next.Scanned, now)
	next.KeysPerSecond = rateOf(next.Progress)
	next.ETASeconds = etaOf(next.Total-next.Scanned, next.KeysPerSecond)
}

// saveWork writes next (over the stored work record, next.Revision) with todo in one
// transaction that holds only under rec's phase; keys whose compares fail (changed since
// the decision) are left out and counted as skipped until it holds.
func (m *Migrator) saveWork(ctx context.Context, rec *api.KeyPhaseRecord, next *api.KeyWork, todo []keyWrite) error {
	phaseKey, workKey := []byte(versions.KeyPhaseKey(rec.Name)), []byte(versions.KeyWorkKey(next.Name))
	for attempt := 0; attempt < 6; attempt++ {
		st := *next
		st.Written += int64(len(todo))
		if st.Kind == workDelete && len(todo) > 0 {
			st.DeletionsStarted = true
		}
		st.Updated = time.Now().UTC()
		value, err := json.Marshal(&st)
		if err != nil {
			return err
		}
		txn := &fsm.Txn{Compares: []fsm.Compare{modIs(phaseKey, rec.Revision), modIs(workKey, next.Revision)}}
		for _, w := range todo {
			txn.Compares = append(txn.Compares, w.cmps...)
			txn.Success = append(txn.Success, w.op)
		}
		txn.Success = append(txn.Success, fsm.Op{Type: fsm.OpPut, Key: workKey, Value: value})
		res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
		if err != nil {
			return err
		}
		if res.Err != nil {
			return res.Err
		}
		if res.Succeeded {
			return nil
		}
		view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
		if err != nil {
			return err
		}
		if !holds(view, modIs(phaseKey, rec.Revision)) || !holds(view, modIs(workKey, next.Revision)) {
			return errKeyWorkMoved
		}
		n := len(todo)
		todo = slices.DeleteFunc(todo, func(w keyWrite) bool {
			return slices.ContainsFunc(w.cmps, func(c fsm.Compare) bool { return !holds(view, c) })
		})
		next.Skipped += int64(n - len(todo))
	}
	return fmt.Errorf("migrate: key migration %s: chunk kept failing its compare-and-swap", next.Name)
}

// holds reports whether a mod-revision compare holds in view.
func holds(view *fsm.View, c fsm.Compare) bool {
	kv, err := view.Get(c.Key, 0)
	if err != nil {
		return c.Int == 0
	}
	return kv.ModRevision == c.Int
}

// finishRollback switches the phase to the rollback's target once the reverse copy is
// done (and, for phase 0, deletes the new range in the same transaction).
func (m *Migrator) finishRollback(ctx context.Context, k *versions.KeyMigration, rec *api.KeyPhaseRecord, w *api.KeyWork) (err error) {
	ctx, span := startSpan(ctx, m.tracer, spanKeyRollback, keyAttrs(k, rec, w)...)
	defer func() { endSpan(span, err) }()
	next := *rec
	to := *rec.RollbackTo
	next.Phase, next.RollbackTo = to, nil
	next.Last = &api.PhaseTransition{From: api.KeyPhaseNew, To: to, By: "leader (rollback copy done)",
		At: time.Now().UTC(), Kind: "rollback-done"}
	if rec.Last != nil {
		next.Last.By = rec.Last.By + " (rollback copy done)"
	}
	var extra []fsm.Op
	if to == api.KeyPhaseOld {
		extra = append(extra, deleteNewRange(k))
	}
	if err := putPhase(ctx, m.cfg.Store, rec, &next, []fsm.Compare{modIs([]byte(versions.KeyWorkKey(k.Name)), w.Revision)}, extra...); err != nil {
		return err
	}
	m.log.Info("key migration rolled back", "migration", k.Name, "phase", to, "copied_back", w.Written)
	return nil
}

// keyAttrs are the span attributes of one step of k's work w in phase rec.
func keyAttrs(k *versions.KeyMigration, rec *api.KeyPhaseRecord, w *api.KeyWork) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("keel.key_migration", k.Name), attribute.Int("keel.phase", rec.Phase),
		attribute.String("keel.work", w.Kind), attribute.Int64("keel.pass_scanned_before", w.Scanned)}
}
