package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind is the kind of one client operation.
type OpKind uint8

const (
	OpGet       OpKind = iota + 1 // linearizable get
	OpGetSerial                   // serializable get (local state, maybe stale)
	OpPut                         // unconditional put
	OpCAS                         // put with ?prev_revision
	OpDelete                      // delete one key
	OpTxn                         // compare A's mod revision; success put A and B; failure get A
	OpScan                        // paged linearizable list of a prefix
)

var opKindNames = [...]string{"?", "get", "get-serial", "put", "cas", "delete", "txn", "scan"}

func (k OpKind) String() string {
	if int(k) < len(opKindNames) {
		return opKindNames[k]
	}
	return fmt.Sprintf("op(%d)", k)
}

// MarshalText makes histories readable as JSON.
func (k OpKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Outcome is what the client learned about an operation.
type Outcome uint8

const (
	// OutcomeOK: the server answered with a definite result (a CAS conflict included).
	OutcomeOK Outcome = iota + 1
	// OutcomeFailed: the operation definitely did not take effect (connection refused,
	// 503 Unavailable, a failed read). It is left out of the check.
	OutcomeFailed
	// OutcomeUnknown: a write whose effect is unknown (timeout, connection lost after
	// sending, 503 LeadershipLost, 504, 500). It may take effect at any later time.
	OutcomeUnknown
)

func (o Outcome) String() string {
	return [...]string{"?", "ok", "failed", "unknown"}[o]
}

// MarshalText makes histories readable as JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// ScanItem is one key of a scan result.
type ScanItem struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	ModRev int64  `json:"mod_rev"`
}

// IncarnationUnknown marks a record whose node restarted while it was in flight.
const IncarnationUnknown = -1

// Record is one client operation: what was asked, when, of which node, and what came
// back. Times are nanoseconds since the history started (monotonic clock).
type Record struct {
	ID          int     `json:"id"`
	Client      int     `json:"client"`
	Node        string  `json:"node"`
	Incarnation int     `json:"incarnation"` // the node process's restart count (IncarnationUnknown: it restarted during the call)
	Kind        OpKind  `json:"kind"`
	Key         string  `json:"key,omitempty"`
	Key2        string  `json:"key2,omitempty"` // OpTxn: the second key written on success
	Value       string  `json:"value,omitempty"`
	Value2      string  `json:"value2,omitempty"`
	PrevRev     int64   `json:"prev_rev,omitempty"` // OpCAS, OpTxn: expected mod revision of Key
	Prefix      string  `json:"prefix,omitempty"`   // OpScan
	Limit       int     `json:"limit,omitempty"`    // OpScan page size
	Call        int64   `json:"call"`
	Return      int64   `json:"return"`
	Outcome     Outcome `json:"outcome"`
	Err         string  `json:"err,omitempty"`
	Unexpected  bool    `json:"unexpected,omitempty"` // an error the API does not allow here
	// Late: the outcome was unknown to the client and learned afterwards from the
	// store's MVCC history (see Resolve); the write may have taken effect after Return.
	Late bool `json:"late,omitempty"`

	Succeeded bool       `json:"succeeded,omitempty"` // OpCAS, OpTxn: guard held
	Rev       int64      `json:"rev,omitempty"`       // write revision or read revision
	Found     bool       `json:"found,omitempty"`     // gets, OpTxn failure get
	GotValue  string     `json:"got_value,omitempty"`
	ModRev    int64      `json:"mod_rev,omitempty"`
	Deleted   int64      `json:"deleted,omitempty"`
	Items     []ScanItem `json:"items,omitempty"`     // OpScan: every page's items
	PageRevs  []int64    `json:"page_revs,omitempty"` // OpScan: revision of each page
	PageSizes []int      `json:"page_sizes,omitempty"`
}

// IsWrite says whether the operation may change the store.
func (r *Record) IsWrite() bool {
	switch r.Kind {
	case OpPut, OpCAS, OpDelete, OpTxn:
		return true
	}
	return false
}

// History collects Records from concurrent clients. Safe for concurrent use.
type History struct {
	start time.Time
	mu    struct {
		sync.Mutex
		records []Record
	}
}

// NewHistory starts an empty history; its clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock: nanoseconds since it started. It never goes backwards.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add stores a finished record and returns its ID.
func (h *History) Add(r Record) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.ID = len(h.mu.records)
	h.mu.records = append(h.mu.records, r)
	return r.ID
}

// Records returns a copy of every record so far, in the order they were added.
func (h *History) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Record(nil), h.mu.records...)
}

// Counts returns how many records there are per outcome.
func (h *History) Counts() map[Outcome]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := map[Outcome]int{}
	for _, r := range h.mu.records {
		c[r.Outcome]++
	}
	return c
}

// WriteJSON writes every record, one JSON object per line, to path.
func (h *History) WriteJSON(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, r := range h.Records() {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	return f.Close()
}

// Operations converts the records into the per-key porcupine history checked against
// KVModel. keys is the workload's key set (a scan becomes one get per key under its
// prefix). Serializable gets are not linearizable by design and are left out (see
// CheckSerializable); failed operations are left out; writes with an unknown outcome
// return at the end of the history (after every other operation returned).
func Operations(records []Record, keys []string) []porcupine.Operation {
	var end int64
	for _, r := range records {
		if r.Return > end && !r.Late {
			end = r.Return
		}
	}
	end++
	obs := observations(records)
	var ops []porcupine.Operation
	for i := range records {
		r := &records[i]
		if r.Kind == OpGetSerial || r.Outcome == OutcomeFailed || r.Outcome == 0 {
			continue
		}
		if r.Outcome == OutcomeUnknown && !r.IsWrite() {
			continue
		}
		ret := r.Return
		if r.Late {
			ret = min(r.Return, end)
			if o, ok := observedWrite(r, obs); ok {
				ret = max(r.Call, min(ret, o.ret))
			}
		}
		if r.Outcome == OutcomeUnknown {
			if o, ok := observedWrite(r, obs); ok {
				rr := *r
				rr.Outcome, rr.Succeeded, rr.Rev = OutcomeOK, true, o.modRev
				ret = max(r.Call, o.ret)
				r = &rr
			} else {
				ret = end
			}
		}
		for _, p := range keyParts(r, keys) {
			ops = append(ops, porcupine.Operation{
				ClientId: r.Client, Input: p.in, Output: p.out, Call: r.Call, Return: ret, Metadata: r.ID,
			})
		}
	}
	return ops
}

// observation is the earliest successful read that returned a value.
type observation struct {
	ret    int64 // return time of the earliest-returning read that saw the value
	modRev int64 // the mod revision it saw with the value
}

// observations maps every value some successful read returned to its earliest
// observation. Values are unique per write, so an observed value proves its write
// took effect, at the revision the read saw, before the read returned.
func observations(records []Record) map[string]observation {
	obs := map[string]observation{}
	see := func(v string, ret, modRev int64) {
		if o, ok := obs[v]; !ok || ret < o.ret {
			obs[v] = observation{ret: ret, modRev: modRev}
		}
	}
	for i := range records {
		r := &records[i]
		if r.Outcome != OutcomeOK {
			continue
		}
		if r.Found && (r.Kind == OpGet || r.Kind == OpGetSerial || r.Kind == OpTxn && !r.Succeeded) {
			see(r.GotValue, r.Return, r.ModRev)
		}
		for _, it := range r.Items {
			see(it.Value, r.Return, it.ModRev)
		}
	}
	return obs
}

// observedWrite says whether some read saw a value of the unknown-outcome write r:
// then r certainly took effect (a CAS or txn succeeded) at the revision seen, before
// that read returned, and the check may treat it as acknowledged then. This keeps
// porcupine's search small: only writes nobody observed stay pending to the end.
func observedWrite(r *Record, obs map[string]observation) (observation, bool) {
	var best observation
	found := false
	for _, v := range []string{r.Value, r.Value2} {
		if o, ok := obs[v]; ok && v != "" && (!found || o.ret < best.ret) {
			best, found = o, true
		}
	}
	return best, found
}

type keyPart struct {
	in  KeyInput
	out KeyOutput
}

// keyParts splits one record into its per-key model operations.
func keyParts(r *Record, keys []string) []keyPart {
	unknown := r.Outcome == OutcomeUnknown
	desc := fmt.Sprintf("#%d c%d %s on %s", r.ID, r.Client, r.Kind, r.Node)
	get := KeyOutput{Succeeded: true, Rev: r.Rev, Found: r.Found, Value: r.GotValue, ModRev: r.ModRev}
	switch r.Kind {
	case OpGet:
		return []keyPart{{KeyInput{Key: r.Key, Success: ActGet, Desc: desc}, get}}
	case OpPut:
		return []keyPart{{KeyInput{Key: r.Key, Success: ActPut, Value: r.Value, Desc: desc},
			KeyOutput{Unknown: unknown, Succeeded: true, Rev: r.Rev}}}
	case OpCAS:
		return []keyPart{{KeyInput{Key: r.Key, Cond: &Cond{Target: CondModRevision, Int: r.PrevRev},
			Success: ActPut, Value: r.Value, Desc: desc},
			KeyOutput{Unknown: unknown, Succeeded: r.Succeeded, Rev: r.Rev}}}
	case OpDelete:
		return []keyPart{{KeyInput{Key: r.Key, Success: ActDelete, Desc: desc},
			KeyOutput{Unknown: unknown, Succeeded: true, Rev: r.Rev, Deleted: r.Deleted}}}
	case OpTxn:
		a := keyPart{KeyInput{Key: r.Key, Cond: &Cond{Target: CondModRevision, Int: r.PrevRev},
			Success: ActPut, Failure: ActGet, Value: r.Value, Desc: desc},
			KeyOutput{Unknown: unknown, Succeeded: r.Succeeded, Rev: r.Rev, Found: r.Found, Value: r.GotValue, ModRev: r.ModRev}}
		b := keyPart{KeyInput{Key: r.Key2, CondElsewhere: true, Success: ActPut, Value: r.Value2, Desc: desc},
			KeyOutput{Unknown: unknown, Succeeded: r.Succeeded, Rev: r.Rev}}
		return []keyPart{a, b}
	case OpScan:
		items := map[string]ScanItem{}
		for _, it := range r.Items {
			items[it.Key] = it
		}
		var parts []keyPart
		for _, k := range keys {
			if !strings.HasPrefix(k, r.Prefix) {
				continue
			}
			it, ok := items[k]
			parts = append(parts, keyPart{KeyInput{Key: k, Success: ActGet, Desc: desc},
				KeyOutput{Succeeded: true, Rev: r.Rev, Found: ok, Value: it.Value, ModRev: it.ModRev}})
		}
		return parts
	}
	return nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
