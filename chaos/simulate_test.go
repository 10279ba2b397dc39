package chaos

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
	"math/rand"
	"testing"
	"time"
)

// simulate builds a linearizable history of n operations by several clients over keys:
// operation i takes effect at time 10·i, inside its [call, return] interval; one write in
// unknownEvery has an unknown outcome, and half of those never take effect. It also
// returns the store's true timeline, as ReadTimeline would read it back.
func simulate(seed int64, n, clients, unknownEvery int, keys []string) ([]Record, *Timeline) {
	rng := rand.New(rand.NewSource(seed))
	type kv struct {
		val string
		mod int64
	}
	state := map[string]kv{}
	var rev int64 = 1
	tl := &Timeline{From: 1, Changes: map[int64]*RevChange{}}
	change := func() *RevChange {
		if tl.Changes[rev] == nil {
			tl.Changes[rev] = &RevChange{Puts: map[string]string{}}
		}
		return tl.Changes[rev]
	}
	free := make([]int64, clients)
	var out []Record
	for i := 0; i < n; i++ {
		at := int64(i+1) * 10
		c := rng.Intn(clients)
		if free[c] >= at {
			continue
		}
		call := at - rng.Int63n(30)
		if call <= free[c] {
			call = free[c] + 1
		}
		r := Record{Client: c, Node: "n1", Call: call, Return: at + rng.Int63n(30), Outcome: OutcomeOK}
		free[c] = r.Return
		r.Key = keys[rng.Intn(len(keys))]
		unknown := rng.Intn(unknownEvery) == 0
		applies := !unknown || rng.Intn(2) == 0
		cur, exists := state[r.Key]
		write := func(key, val string) { state[key] = kv{val, rev}; change().Puts[key] = val }
		switch rng.Intn(5) {
		case 0:
			r.Kind, r.Found, r.GotValue, r.ModRev, r.Rev = OpGet, exists, cur.val, cur.mod, rev
			unknown = false
		case 1:
			r.Kind, r.Value = OpPut, fmt.Sprintf("v%d", i)
			if applies {
				rev++
				write(r.Key, r.Value)
				r.Rev = rev
			}
		case 2:
			r.Kind, r.Value, r.PrevRev = OpCAS, fmt.Sprintf("v%d", i), cur.mod
			if rng.Intn(3) == 0 {
				r.PrevRev++
			}
			if applies && r.PrevRev == cur.mod {
				rev++
				write(r.Key, r.Value)
				r.Rev, r.Succeeded = rev, true
			}
		case 3:
			r.Kind = OpDelete
			if applies && exists {
				rev++
				delete(state, r.Key)
				change().Deletes = append(change().Deletes, r.Key)
				r.Rev, r.Deleted = rev, 1
			} else {
				r.Rev = rev
			}
		case 4:
			r.Kind, r.Value, r.Value2, r.PrevRev = OpTxn, fmt.Sprintf("v%d", i), fmt.Sprintf("w%d", i), cur.mod
			for r.Key2 = r.Key; r.Key2 == r.Key; {
				r.Key2 = keys[rng.Intn(len(keys))]
			}
			switch {
			case applies && r.PrevRev == cur.mod:
				rev++
				write(r.Key, r.Value)
				write(r.Key2, r.Value2)
				r.Rev, r.Succeeded = rev, true
			default:
				r.Found, r.GotValue, r.ModRev, r.Rev = exists, cur.val, cur.mod, rev
			}
		}
		if unknown {
			r.Outcome = OutcomeUnknown
		}
		r.ID = len(out)
		out = append(out, r)
	}
	tl.To = rev
	return out, tl
}

func TestCheckSimulatedHistory(t *testing.T) {
	keys := []string{"k/0", "k/1", "k/2", "k/3", "k/4", "k/5", "k/6", "k/7"}
	h, tl := simulate(1, 4000, 6, 30, keys)
	start := time.Now()
	rep := Check(h, keys, "k/", tl, time.Minute)
	if !rep.OK() {
		t.Fatalf("simulated linearizable history failed: %s %q", rep, rep.Violations)
	}
	t.Logf("%s in %s", rep, time.Since(start))

	// Break it: a read late in the history returns a value overwritten long before.
	broken := append([]Record(nil), h...)
	i, j := staleRead(broken)
	broken[i].GotValue, broken[i].ModRev = broken[j].Value, broken[j].Rev
	start = time.Now()
	if rep := Check(broken, keys, "k/", tl, time.Minute); rep.Linearizable != porcupine.Illegal {
		t.Fatalf("a stale read (#%d returns #%d's value): linearizable = %s, want Illegal", i, j, rep.Linearizable)
	}
	t.Logf("stale read found in %s", time.Since(start))

	// Lose an acknowledged write from the store's history.
	for k := range h {
		if h[k].Kind == OpPut && h[k].Outcome == OutcomeOK {
			delete(tl.Changes[h[k].Rev].Puts, h[k].Key)
			_, v := Resolve(h, tl, "k/")
			if len(v) != 1 || !strings.Contains(v[0], "acknowledged write lost") {
				t.Fatalf("resolve after losing #%d: violations %q, want one lost write", k, v)
			}
			break
		}
	}
}

// staleRead finds a late read and an older, different acknowledged put of its key.
func staleRead(h []Record) (int, int) {
	for i := len(h) - 1; i > 0; i-- {
		if h[i].Kind == OpGet && h[i].Found {
			for j := 0; j < i-50; j++ {
				if h[j].Kind == OpPut && h[j].Key == h[i].Key && h[j].Outcome == OutcomeOK && h[j].Value != h[i].GotValue {
					return i, j
				}
			}
		}
	}
	panic("no read to make stale")
}
