package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// FinalClient is the client ID of the reads the verifier makes after healing.
const FinalClient = 999

// Report is the verdict on one history.
type Report struct {
	Records      int                   // client operations recorded
	KeyOps       int                   // per-key operations given to porcupine
	Unknown      int                   // writes whose outcome stayed unknown
	Resolved     int                   // unknown writes settled from the MVCC history
	Failed       int                   // operations that definitely did not happen
	SerialReads  int                   // serializable reads checked by CheckSerializable
	Linearizable porcupine.CheckResult // porcupine's verdict on KVModel
	Violations   []string              // every broken rule, linearizability included
	info         porcupine.LinearizationInfo
}

// OK says whether the history passed every check. A porcupine timeout is not OK.
func (r Report) OK() bool { return r.Linearizable == porcupine.Ok && len(r.Violations) == 0 }

// String is a one-line summary.
func (r Report) String() string {
	return fmt.Sprintf("%d ops (%d per-key ops, %d unknown, %d resolved from MVCC history, %d failed, %d serializable reads): linearizable=%s, %d violations",
		r.Records, r.KeyOps, r.Unknown, r.Resolved, r.Failed, r.SerialReads, r.Linearizable, len(r.Violations))
}

// Check runs every check over a finished history. When tl (the store's MVCC history,
// see ReadTimeline) is given, Resolve first settles unknown outcomes with it and checks
// that every acknowledged write is in it and every value under prefix was written by a
// client. Then: porcupine against KVModel (gets, puts, CAS, deletes, transactions,
// scans), the weaker rule for serializable reads, the scan page rules, and the
// durability of acknowledged writes against the final reads.
func Check(records []Record, keys []string, prefix string, tl *Timeline, timeout time.Duration) Report {
	rep := Report{Records: len(records)}
	records, resolveViolations := Resolve(records, tl, prefix)
	rep.Violations = append(rep.Violations, resolveViolations...)
	for _, r := range records {
		switch {
		case r.Outcome == OutcomeUnknown && r.IsWrite():
			rep.Unknown++
		case r.Late:
			rep.Resolved++
		case r.Outcome == OutcomeFailed:
			rep.Failed++
		case r.Kind == OpGetSerial && r.Outcome == OutcomeOK:
			rep.SerialReads++
		}
	}
	ops := Operations(records, keys)
	rep.KeyOps = len(ops)
	model := KVModel.ToModel()
	rep.Linearizable, rep.info = porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch rep.Linearizable {
	case porcupine.Illegal:
		rep.Violations = append(rep.Violations, "history is not linearizable (see linearizability.html)")
	case porcupine.Unknown:
		rep.Violations = append(rep.Violations, fmt.Sprintf("linearizability check timed out after %s", timeout))
	}
	for _, r := range records {
		if r.Unexpected {
			rep.Violations = append(rep.Violations, fmt.Sprintf("#%d %s of %q on %s: unexpected error: %s", r.ID, r.Kind, r.Key, r.Node, r.Err))
		}
	}
	rep.Violations = append(rep.Violations, CheckSerializable(records)...)
	rep.Violations = append(rep.Violations, CheckScans(records)...)
	rep.Violations = append(rep.Violations, CheckDurability(records)...)
	return rep
}

// Annotate adds fault events to the visualization.
func (r *Report) Annotate(events []FaultEvent) {
	r.info.AddAnnotations(Annotations(events))
}

// WriteVisualization writes porcupine's HTML view of the checked history.
func (r Report) WriteVisualization(path string) error {
	if err := porcupine.VisualizePath(KVModel.ToModel(), r.info, path); err != nil {
		return fmt.Errorf("write visualization: %w", err)
	}
	return nil
}

// knownWrite is a write whose effect and revision the client learned.
type knownWrite struct {
	rev    int64
	value  string // "" for a delete
	delete bool
	rec    *Record
}

// writeIndex lists the applied writes with known revisions per key (ascending) and
// every written value (values are unique per history).
type writeIndex struct {
	byKey   map[string][]knownWrite
	byValue map[string]*Record
}

func indexWrites(records []Record) writeIndex {
	ix := writeIndex{byKey: map[string][]knownWrite{}, byValue: map[string]*Record{}}
	add := func(key string, w knownWrite) { ix.byKey[key] = append(ix.byKey[key], w) }
	for i := range records {
		r := &records[i]
		if !r.IsWrite() {
			continue
		}
		if r.Value != "" {
			ix.byValue[r.Value] = r
		}
		if r.Value2 != "" {
			ix.byValue[r.Value2] = r
		}
		if r.Outcome != OutcomeOK {
			continue
		}
		switch {
		case r.Kind == OpPut, r.Kind == OpCAS && r.Succeeded:
			add(r.Key, knownWrite{rev: r.Rev, value: r.Value, rec: r})
		case r.Kind == OpDelete && r.Deleted > 0:
			add(r.Key, knownWrite{rev: r.Rev, delete: true, rec: r})
		case r.Kind == OpTxn && r.Succeeded:
			add(r.Key, knownWrite{rev: r.Rev, value: r.Value, rec: r})
			add(r.Key2, knownWrite{rev: r.Rev, value: r.Value2, rec: r})
		}
	}
	for k := range ix.byKey {
		ws := ix.byKey[k]
		sort.Slice(ws, func(i, j int) bool { return ws[i].rev < ws[j].rev })
	}
	return ix
}

// CheckSerializable checks serializable gets, which may be stale and so are not part of
// the linearizability check, against the rule they do promise: a read returns the key
// as it was at the read's revision R on some replica. So the value was written by a
// write invoked before the read returned, with the mod revision that write got; no
// acknowledged write to the key has a revision in (mod revision, R]; and one node
// process never goes back in time (R does not decrease across reads that follow each
// other on the same node incarnation).
func CheckSerializable(records []Record) []string {
	ix := indexWrites(records)
	var out []string
	type group struct {
		node string
		inc  int
	}
	groups := map[group][]*Record{}
	for i := range records {
		r := &records[i]
		if r.Kind != OpGetSerial || r.Outcome != OutcomeOK {
			continue
		}
		if r.Incarnation != IncarnationUnknown { // which process answered is unknown
			groups[group{r.Node, r.Incarnation}] = append(groups[group{r.Node, r.Incarnation}], r)
		}
		if !r.Found {
			continue
		}
		out = append(out, checkSnapshotRead(ix, r.Key, r.GotValue, r.ModRev, r.Rev, r)...)
	}
	for g, rs := range groups {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Call < rs[j].Call })
		for i, b := range rs {
			for _, a := range rs[:i] {
				if a.Return < b.Call && b.Rev > 0 && b.Rev < a.Rev {
					out = append(out, fmt.Sprintf("serializable reads on %s (incarnation %d) went back in time: #%d saw revision %d, later #%d saw %d",
						g.node, g.inc, a.ID, a.Rev, b.ID, b.Rev))
				}
			}
		}
	}
	return out
}

// checkSnapshotRead checks that (value, modRev) is key's state at revision rev.
func checkSnapshotRead(ix writeIndex, key, value string, modRev, rev int64, r *Record) []string {
	var out []string
	w, ok := ix.byValue[value]
	switch {
	case !ok:
		out = append(out, fmt.Sprintf("#%d %s of %s on %s returned %q, which no client wrote", r.ID, r.Kind, key, r.Node, value))
	case w.Call > r.Return:
		out = append(out, fmt.Sprintf("#%d %s of %s returned %q before its write #%d was invoked", r.ID, r.Kind, key, value, w.ID))
	case w.Outcome == OutcomeOK && w.Rev != modRev:
		out = append(out, fmt.Sprintf("#%d %s of %s returned %q at mod revision %d, but write #%d was acknowledged at revision %d",
			r.ID, r.Kind, key, value, modRev, w.ID, w.Rev))
	}
	if rev > 0 && modRev > rev {
		out = append(out, fmt.Sprintf("#%d %s of %s: mod revision %d is after the read revision %d", r.ID, r.Kind, key, modRev, rev))
	}
	for _, kw := range ix.byKey[key] {
		if kw.rev > modRev && kw.rev <= rev {
			out = append(out, fmt.Sprintf("#%d %s of %s at revision %d returned %q @%d, missing write #%d at revision %d",
				r.ID, r.Kind, key, rev, value, modRev, kw.rec.ID, kw.rev))
			break
		}
	}
	return out
}

// CheckScans checks the paging rules of every complete scan: every page is served at
// the scan's one revision, no page holds more than the limit, and the items are the
// prefix's keys in strictly ascending order.
func CheckScans(records []Record) []string {
	var out []string
	for i := range records {
		r := &records[i]
		if r.Kind != OpScan || r.Outcome != OutcomeOK {
			continue
		}
		for p, rev := range r.PageRevs {
			if rev != r.Rev {
				out = append(out, fmt.Sprintf("scan #%d: page %d served at revision %d, first page at %d", r.ID, p, rev, r.Rev))
			}
		}
		for p, n := range r.PageSizes {
			if r.Limit > 0 && n > r.Limit {
				out = append(out, fmt.Sprintf("scan #%d: page %d holds %d items, limit %d", r.ID, p, n, r.Limit))
			}
		}
		for j, it := range r.Items {
			if !strings.HasPrefix(it.Key, r.Prefix) {
				out = append(out, fmt.Sprintf("scan #%d of %q returned key %q outside the prefix", r.ID, r.Prefix, it.Key))
			}
			if j > 0 && r.Items[j-1].Key >= it.Key {
				out = append(out, fmt.Sprintf("scan #%d: key %q after %q (not strictly ascending)", r.ID, it.Key, r.Items[j-1].Key))
			}
		}
	}
	return out
}

// CheckDurability checks, for every key the verifier read after healing (records of
// FinalClient), that the last acknowledged write to it (highest revision) survived: the
// final read shows that write, or a later one.
func CheckDurability(records []Record) []string {
	ix := indexWrites(records)
	unknownDelete := map[string]bool{}
	for _, r := range records {
		if r.Outcome == OutcomeUnknown && r.Kind == OpDelete {
			unknownDelete[r.Key] = true
		}
	}
	var out []string
	for i := range records {
		f := &records[i]
		if f.Client != FinalClient || f.Kind != OpGet || f.Outcome != OutcomeOK {
			continue
		}
		ws := ix.byKey[f.Key]
		if len(ws) == 0 {
			continue
		}
		last := ws[len(ws)-1]
		switch {
		case f.Found && f.ModRev > last.rev:
		case f.Found && f.ModRev == last.rev && !last.delete && f.GotValue == last.value:
		case !f.Found && (last.delete || unknownDelete[f.Key]):
		default:
			what := fmt.Sprintf("put %q", last.value)
			if last.delete {
				what = "delete"
			}
			got := "absent"
			if f.Found {
				got = fmt.Sprintf("%q @%d", f.GotValue, f.ModRev)
			}
			out = append(out, fmt.Sprintf("acknowledged write lost: #%d %s of %s at revision %d; final read #%d on %s shows %s",
				last.rec.ID, what, f.Key, last.rev, f.ID, f.Node, got))
		}
	}
	return out
}
