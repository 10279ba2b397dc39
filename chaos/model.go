package chaos

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Action is what a guarded per-key operation does when its guard holds (Success) or
// fails (Failure).
type Action uint8

const (
	ActNone   Action = iota // nothing happens to this key
	ActGet                  // read the key
	ActPut                  // write KeyInput.Value
	ActDelete               // delete the key
)

func (a Action) String() string {
	return [...]string{"none", "get", "put", "delete"}[a]
}

// CondTarget names the field a Cond looks at.
type CondTarget uint8

const (
	CondModRevision CondTarget = iota + 1 // Int == key's mod revision (0 = absent)
	CondValue                             // Value == key's value (absent never matches)
)

// Cond is an equality guard on one key, evaluated at the operation's linearization point.
type Cond struct {
	Target CondTarget
	Int    int64
	Value  string
}

// KeyInput is one operation as seen by one key: the input of the per-key model.
//
// Every client operation becomes one or more KeyInputs (a transaction or a scan over
// several keys becomes one per key, sharing the call and return time of the whole
// operation). A plain put is {Success: ActPut}; a compare-and-swap is {Cond, Success:
// ActPut}; a transaction that writes key B but compares key A gives B the part
// {CondElsewhere: true, Success: ActPut}, whose branch is learned from the output.
type KeyInput struct {
	Key           string
	Cond          *Cond
	CondElsewhere bool
	Success       Action
	Failure       Action
	Value         string // ActPut
	Desc          string // the whole client operation, for the visualization
}

// KeyOutput is what the client observed for one KeyInput.
//
// Unknown means the client never learned the outcome (timeout, connection lost after
// sending, 503 LeadershipLost, 504): the operation may or may not have taken effect, at
// any time after its call. The history gives such operations a return time after every
// other operation, so "never happened" is the linearization that places them last.
type KeyOutput struct {
	Unknown   bool
	Succeeded bool   // the guard held (always true for unguarded operations)
	Rev       int64  // write revision (put, delete that deleted) or read revision (get)
	Found     bool   // ActGet: the key existed
	Value     string // ActGet: its value
	ModRev    int64  // ActGet: its mod revision
	Deleted   int64  // ActDelete: keys deleted (0 or 1)
}

// keyState is the model's state of one key.
//
// ModRev is the key's mod revision, 0 when absent, and revUnknown when the last write
// was one whose outcome the client never learned: its revision is unknown until a read
// observes it, which then pins it (values are unique, so this is sound).
type keyState struct {
	Exists bool
	Value  string
	ModRev int64
	// Floor: every write to the key from here on, and an unknown ModRev, is at a
	// revision above it. It carries the revision of the last write whose revision was
	// seen across writes whose revision nobody saw, and across deletes: a put of
	// unknown outcome after a write at revision 7 cannot be read back at revision 6.
	Floor int64
}

// floor is the revision every later write of the key must exceed.
func (s keyState) floor() int64 {
	if s.Exists && s.ModRev != revUnknown {
		return max(s.ModRev, s.Floor)
	}
	return s.Floor
}

const revUnknown = -1

// KVModel is the sequential specification keel must be linearizable against: a map of
// keys to (value, mod revision), partitioned by key. Per key it checks that a read
// returns the last write's value and mod revision, that write revisions grow, that a
// guard holds exactly when the output says it did, and that a delete reports whether the
// key existed. Cross-key atomicity of transactions is checked only through the shared
// revision each part must accept (a known weakening of partitioning).
var KVModel = porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []interface{} { return []interface{}{keyState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		return stepKey(state.(keyState), input.(KeyInput), output.(KeyOutput))
	},
	Hash: func(state interface{}) uint64 {
		s := state.(keyState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t|%d|%d|%s", s.Exists, s.ModRev, s.Floor, s.Value)
		return h.Sum64()
	},
	DescribeOperation: describeKeyOp,
	DescribeState: func(state interface{}) string {
		s := state.(keyState)
		switch {
		case !s.Exists:
			return fmt.Sprintf("absent, writes after @%d", s.Floor)
		case s.ModRev == revUnknown:
			return fmt.Sprintf("%s @? (after @%d)", s.Value, s.Floor)
		default:
			return fmt.Sprintf("%s @%d", s.Value, s.ModRev)
		}
	},
}

// stepKey returns every state the key can be in after the operation, or none when the
// output is impossible from s.
func stepKey(s keyState, in KeyInput, out KeyOutput) []interface{} {
	if out.Unknown {
		return stepUnknown(s, in)
	}
	succeeded := true
	if in.Cond != nil || in.CondElsewhere {
		succeeded = out.Succeeded
	}
	if in.Cond != nil {
		holds, known := evalCond(s, in.Cond)
		if known && holds != succeeded {
			return nil
		}
		if !known && succeeded {
			var ok bool
			if s, ok = refineCond(s, in.Cond); !ok {
				return nil
			}
		}
	}
	act := in.Failure
	if succeeded {
		act = in.Success
	}
	next, ok := applyKnown(s, in, act, out)
	if !ok {
		return nil
	}
	return []interface{}{next}
}

// stepUnknown applies an operation whose outcome nobody saw. It always succeeds; the
// "did not happen" case is covered by linearizing it after everything else.
func stepUnknown(s keyState, in KeyInput) []interface{} {
	var branches []Action
	switch {
	case in.CondElsewhere:
		branches = []Action{in.Success, in.Failure}
	case in.Cond != nil:
		holds, known := evalCond(s, in.Cond)
		switch {
		case !known:
			branches = []Action{in.Success, in.Failure}
		case holds:
			branches = []Action{in.Success}
		default:
			branches = []Action{in.Failure}
		}
	default:
		branches = []Action{in.Success}
	}
	var out []interface{}
	for _, a := range branches {
		switch a {
		case ActPut:
			out = appendState(out, keyState{Exists: true, Value: in.Value, ModRev: revUnknown, Floor: s.floor()})
		case ActDelete:
			out = appendState(out, keyState{Floor: s.floor()})
		default:
			out = appendState(out, s)
		}
	}
	return out
}

func appendState(states []interface{}, s keyState) []interface{} {
	for _, x := range states {
		if x.(keyState) == s {
			return states
		}
	}
	return append(states, s)
}

// evalCond says whether the guard holds in s, and whether that is known (a mod
// revision guard on a key whose revision is unknown is not).
func evalCond(s keyState, c *Cond) (holds, known bool) {
	switch c.Target {
	case CondModRevision:
		if c.Int == 0 {
			return !s.Exists, true
		}
		if !s.Exists {
			return false, true
		}
		if s.ModRev == revUnknown {
			return false, false
		}
		return s.ModRev == c.Int, true
	case CondValue:
		return s.Exists && s.Value == c.Value, true
	}
	return false, false
}

// refineCond pins what a guard that held reveals about an unknown mod revision.
// A guard that names a revision at or below the floor cannot have held.
func refineCond(s keyState, c *Cond) (keyState, bool) {
	if c.Target == CondModRevision && s.Exists && s.ModRev == revUnknown {
		if c.Int <= s.Floor {
			return s, false
		}
		s.ModRev, s.Floor = c.Int, 0
	}
	return s, true
}

// applyKnown checks the observed output of act against s and returns the next state.
func applyKnown(s keyState, in KeyInput, act Action, out KeyOutput) (keyState, bool) {
	switch act {
	case ActGet:
		if out.Found != s.Exists {
			return s, false
		}
		if !out.Found {
			return s, true
		}
		if out.Value != s.Value || (out.Rev > 0 && out.ModRev > out.Rev) {
			return s, false
		}
		if s.ModRev == revUnknown {
			if out.ModRev <= s.Floor {
				return s, false
			}
			s.ModRev, s.Floor = out.ModRev, 0
			return s, true
		}
		return s, out.ModRev == s.ModRev
	case ActPut:
		if out.Rev <= s.floor() {
			return s, false
		}
		return keyState{Exists: true, Value: in.Value, ModRev: out.Rev}, true
	case ActDelete:
		want := int64(0)
		if s.Exists {
			want = 1
		}
		if out.Deleted != want {
			return s, false
		}
		if s.Exists && out.Rev <= s.floor() {
			return s, false
		}
		return keyState{Floor: max(out.Rev, s.floor())}, true
	}
	return s, true
}

// partitionByKey splits a history into one sub-history per key.
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(KeyInput).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describeKeyOp(input, output interface{}) string {
	in, out := input.(KeyInput), output.(KeyOutput)
	var b strings.Builder
	b.WriteString(in.Key)
	b.WriteString(": ")
	if in.Cond != nil {
		switch in.Cond.Target {
		case CondModRevision:
			fmt.Fprintf(&b, "if mod_rev==%d ", in.Cond.Int)
		case CondValue:
			fmt.Fprintf(&b, "if value==%s ", in.Cond.Value)
		}
	}
	if in.CondElsewhere {
		b.WriteString("if <other key> ")
	}
	b.WriteString(describeAction(in.Success, in.Value))
	if in.Failure != ActNone {
		b.WriteString(" else " + describeAction(in.Failure, in.Value))
	}
	b.WriteString(" -> ")
	switch {
	case out.Unknown:
		b.WriteString("unknown")
	default:
		if in.Cond != nil || in.CondElsewhere {
			fmt.Fprintf(&b, "succeeded=%t ", out.Succeeded)
		}
		fmt.Fprintf(&b, "rev=%d", out.Rev)
		if out.Found {
			fmt.Fprintf(&b, " found %s @%d", out.Value, out.ModRev)
		} else if in.Success == ActGet || in.Failure == ActGet {
			b.WriteString(" absent")
		}
		if out.Deleted > 0 {
			fmt.Fprintf(&b, " deleted=%d", out.Deleted)
		}
	}
	if in.Desc != "" {
		b.WriteString("  [" + in.Desc + "]")
	}
	return b.String()
}

func describeAction(a Action, value string) string {
	if a == ActPut {
		return "put " + value
	}
	return a.String()
}
