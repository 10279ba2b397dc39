package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"maps"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// maxChunkBytes bounds the converted values one chunk writes in its transaction (one
// Raft log entry); a chunk of large objects ends early and the next goes on from there.
const maxChunkBytes = 4 << 20

// errStorageVersionChanged: the StorageVersion record moved since the pass began; the
// next step restarts the pass.
var errStorageVersionChanged = errors.New("migrate: the StorageVersion record changed since the pass began")

// rewrite is one object of a chunk to store in the target version.
type rewrite struct {
	kv    fsm.KeyValue
	from  string
	value []byte
}

// chunk scans the next chunk of the pass and writes, in one transaction, every object
// of it not in the target version together with the checkpoint that counts them. The
// transaction holds only if the status record is still the one this step read (not
// aborted, no other leader), the StorageVersion record is the one the pass began with,
// and each object's mod revision is still the one the scan read; so a leader that
// dies anywhere leaves rewrites and counts in agreement, and a new leader resumes with
// exact counts. Objects a client changed since are left out and counted as skipped.
func (m *Migrator) chunk(ctx context.Context, view *fsm.View, r *versions.Resource, st *Status) (err error) {
	ctx, span := startSpan(ctx, m.tracer, spanChunk, attribute.String("keel.resource", r.Key()),
		attribute.String("keel.target", st.Target), attribute.Int64("keel.pass", int64(st.Pass)),
		attribute.Int64("keel.scan_revision", st.ScanRevision))
	scanned, migrated, skipped := st.Scanned, st.Migrated, st.Skipped
	defer func() {
		span.SetAttributes(attribute.Int64("keel.scanned", st.Scanned-scanned),
			attribute.Int64("keel.migrated", st.Migrated-migrated), attribute.Int64("keel.skipped", st.Skipped-skipped),
			attribute.Bool("keel.pass_scanned", st.ScanRevision == 0))
		endSpan(span, err)
	}()
	prefix := []byte(r.Prefix)
	start := prefix
	if len(st.NextKey) > 0 {
		start = st.NextKey
	}
	kvs, next, err := view.Range(start, fsm.PrefixEnd(prefix), st.ScanRevision, m.cfg.Chunk)
	if errors.Is(err, fsm.ErrCompacted) {
		// The pass's revision is compacted: go on from the same key at the latest
		// revision (KEP-365's inconsistent continue). Objects written meanwhile are in
		// the target version already, so nothing is missed that matters.
		m.log.Info("migration scan revision compacted; continuing at the latest revision",
			"resource", r.Key(), "revision", st.ScanRevision, "latest", view.Revision())
		st.ScanRevision = view.Revision()
		kvs, next, err = view.Range(start, fsm.PrefixEnd(prefix), st.ScanRevision, m.cfg.Chunk)
	}
	if err != nil {
		return err
	}
	var todo []rewrite
	bytes := 0
	for _, kv := range kvs {
		if bytes >= maxChunkBytes {
			next = kv.Key // the rest is the next chunk's
			break
		}
		st.Scanned++
		st.PassScanned++
		from := r.StoredVersion(kv)
		if from == st.Target {
			continue
		}
		if m.cfg.DryRun {
			st.Migrated++ // would be
			continue
		}
		value, err := convert(r, kv, from, st.Target)
		if err != nil {
			m.addPoison(st, kv, err)
			continue
		}
		bytes += len(value) + len(kv.Key)
		todo = append(todo, rewrite{kv: kv, from: from, value: value})
	}
	st.NextKey = next
	if next == nil {
		st.ScanRevision = 0 // scanned: the next step counts what is left
	}
	if err := m.wait(ctx, len(todo)); err != nil {
		return err
	}
	updateRate(st, time.Now()) // after the wait: the rate the limit allows
	return m.commit(ctx, r, st, todo)
}

// commit writes todo and st in one transaction (see chunk), leaving out the objects
// that changed since the scan until it holds. On success *st is what was stored.
func (m *Migrator) commit(ctx context.Context, r *versions.Resource, st *Status, todo []rewrite) error {
	svKey := []byte(versions.StorageVersionKey(r.Key()))
	for attempt := 0; ; attempt++ {
		next := *st
		next.Remaining = maps.Clone(st.Remaining)
		next.Migrated += int64(len(todo))
		for _, w := range todo {
			if next.Remaining[w.from] > 0 {
				next.Remaining[w.from]--
			}
		}
		cmp, put, err := saveOp(&next, time.Now().UTC())
		if err != nil {
			return err
		}
		txn := &fsm.Txn{Compares: []fsm.Compare{cmp,
			{Key: svKey, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: st.StorageVersionRevision}}}
		for _, w := range todo {
			txn.Compares = append(txn.Compares, fsm.Compare{Key: w.kv.Key, Target: fsm.TargetModRevision,
				Result: fsm.CompareEqual, Int: w.kv.ModRevision})
			txn.Success = append(txn.Success, fsm.Op{Type: fsm.OpPut, Key: w.kv.Key, Value: w.value,
				Encoding: versions.EncodingTag(r.Key(), st.Target)})
		}
		txn.Success = append(txn.Success, put)
		res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn})
		if err != nil {
			return err // replication trouble: the step is retried from the checkpoint
		}
		if res.Err != nil {
			if len(todo) == 0 {
				return res.Err
			}
			return m.isolate(ctx, r, st, todo)
		}
		if res.Succeeded {
			*st = next
			return nil
		}
		if attempt >= 5 {
			return fmt.Errorf("migrate: chunk of %s kept failing its compare-and-swap; retrying from the checkpoint", r.Key())
		}
		if todo, err = m.unchanged(ctx, r, st, todo); err != nil {
			return err
		}
	}
}

// unchanged finds out why a chunk's transaction failed: the record or the
// StorageVersion moved (an error), or objects changed since the scan (counted as
// skipped and left out of the returned todo).
func (m *Migrator) unchanged(ctx context.Context, r *versions.Resource, st *Status, todo []rewrite) ([]rewrite, error) {
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	cur, err := ReadStatus(view, r.Key())
	if err != nil {
		return nil, err
	}
	curRev := int64(0) // the record's revision now; 0: absent (the pass's first chunk)
	if cur != nil {
		curRev = cur.Revision
	}
	if curRev != st.Revision {
		return nil, fmt.Errorf("%w (aborted, or another leader)", ErrConflict)
	}
	sv, err := versions.StorageVersionAt(view, r.Key())
	if err != nil {
		return nil, err
	}
	if sv.Revision != st.StorageVersionRevision {
		return nil, errStorageVersionChanged
	}
	return slices.DeleteFunc(todo, func(w rewrite) bool {
		kv, err := view.Get(w.kv.Key, 0)
		if err == nil && kv.ModRevision == w.kv.ModRevision {
			return false
		}
		st.Skipped++
		return true
	}), nil
}

// isolate writes the rewrites of a chunk whose transaction the state machine refused
// one by one, to name the object it refuses (poison), then stores the checkpoint. (A
// leader dying in between leaves counts that call its rewrites skipped.)
func (m *Migrator) isolate(ctx context.Context, r *versions.Resource, st *Status, todo []rewrite) error {
	svKey := []byte(versions.StorageVersionKey(r.Key()))
	for _, w := range todo {
		res, err := m.cfg.Store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{
			Compares: []fsm.Compare{
				{Key: []byte(StatusKey(r.Key())), Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: st.Revision},
				{Key: svKey, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: st.StorageVersionRevision},
				{Key: w.kv.Key, Target: fsm.TargetModRevision, Result: fsm.CompareEqual, Int: w.kv.ModRevision}},
			Success: []fsm.Op{{Type: fsm.OpPut, Key: w.kv.Key, Value: w.value, Encoding: versions.EncodingTag(r.Key(), st.Target)}},
		}})
		switch {
		case err != nil:
			return err
		case res.Err != nil:
			m.addPoison(st, w.kv, res.Err)
		case res.Succeeded:
			st.Migrated++
			if st.Remaining[w.from] > 0 {
				st.Remaining[w.from]--
			}
		default:
			if _, err := m.unchanged(ctx, r, st, []rewrite{w}); err != nil {
				return err
			}
		}
	}
	return m.save(ctx, st, nil)
}

func (m *Migrator) addPoison(st *Status, kv fsm.KeyValue, err error) {
	if !slices.ContainsFunc(st.Poison, func(p Poison) bool { return p.Key == string(kv.Key) }) && len(st.Poison) < maxPoison {
		st.Poison = append(st.Poison, Poison{Key: string(kv.Key), Error: err.Error()})
	}
	m.log.Warn("migration: object cannot be rewritten", "key", string(kv.Key), "error", err)
}

// convert returns kv's object in version target, or why it cannot be.
func convert(r *versions.Resource, kv fsm.KeyValue, from, target string) ([]byte, error) {
	obj, err := versions.DecodeObject(kv.Value)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPoison, err)
	}
	out, lost, err := r.ConvertLost(obj, from, target)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPoison, err)
	}
	if len(lost) > 0 {
		// Never lose silently: a dropped field that holds a value, or a value the
		// target cannot hold (a downgrade of the encoding). The object stays as it
		// is, listed, until a client rewrites it (PUT with ?force=true accepts it).
		return nil, fmt.Errorf("%w: converting %s to %s would lose the values of %v",
			errPoison, from, target, lost)
	}
	value, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errPoison, err)
	}
	return value, nil
}

var errPoison = errors.New("migrate: object cannot be converted")

// updateRate adds the checkpoint of st (objects scanned, all passes) at now and sets
// the rate over the last seconds (see progress.go) and the ETA of the pass.
func updateRate(st *Status, now time.Time) {
	st.Progress = observe(st.Progress, st.Scanned, now)
	st.ObjectsPerSecond = rateOf(st.Progress)
	st.ETASeconds = etaOf(st.Total-st.PassScanned, st.ObjectsPerSecond)
}

// setRate applies the cluster-wide rate (objects per second, < 0 unlimited) to the
// limiter. Its burst is one chunk (the most one wait takes), and a new limiter starts
// empty: a second's worth of tokens up front would let the first chunks out at once,
// faster than the rate set.
func (m *Migrator) setRate(r int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.rate = r
	if r <= 0 {
		return
	}
	burst := m.cfg.Chunk
	if m.mu.limiter == nil {
		m.mu.limiter = rate.NewLimiter(rate.Limit(r), burst)
		m.mu.limiter.AllowN(time.Now(), burst)
		return
	}
	m.mu.limiter.SetLimit(rate.Limit(r))
	m.mu.limiter.SetBurst(burst)
}

// wait takes n tokens of the rewrite rate (the cluster-wide setting).
func (m *Migrator) wait(ctx context.Context, n int) error {
	m.mu.Lock()
	r, lim := m.mu.rate, m.mu.limiter
	m.mu.Unlock()
	if r <= 0 || n == 0 || lim == nil {
		return nil
	}
	return lim.WaitN(ctx, n)
}
