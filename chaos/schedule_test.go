package chaos

import (
	"math/rand"
	"reflect"
	"testing"
	"time"
)

func TestScheduleReplaysFromSeed(t *testing.T) {
	specs := []FaultSpec{
		{Kind: FaultKill, Target: TargetLeader, HoldMin: time.Second, HoldMax: 3 * time.Second, GapMin: 2 * time.Second, GapMax: 4 * time.Second},
		{Kind: FaultSplit, HoldMin: 2 * time.Second, HoldMax: 4 * time.Second, GapMin: time.Second, GapMax: 2 * time.Second},
	}
	a := NewSchedule(42, 30*time.Second, specs...)
	b := NewSchedule(42, 30*time.Second, specs...)
	c := NewSchedule(43, 30*time.Second, specs...)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different schedules:\n%s\n%s", a, b)
	}
	if reflect.DeepEqual(a.Steps, c.Steps) {
		t.Errorf("seeds 42 and 43 gave the same schedule %s", a)
	}
	if len(a.Steps) < 4 {
		t.Fatalf("schedule %s: %d steps, want >= 4 in 30s", a, len(a.Steps))
	}
	var prevEnd time.Duration
	for i, st := range a.Steps {
		if st.At < prevEnd {
			t.Errorf("#%d %s starts before the previous step healed at %s", i, st, prevEnd)
		}
		if st.Hold < time.Second || st.Hold > 4*time.Second {
			t.Errorf("#%d %s: hold out of its spec's range", i, st)
		}
		if want := specs[i%2].Kind; st.Kind != want {
			t.Errorf("#%d kind = %s, want %s (round robin)", i, st.Kind, want)
		}
		prevEnd = st.At + st.Hold
	}
	if a.End() > 30*time.Second {
		t.Errorf("schedule ends at %s, after its 30s window", a.End())
	}
}

func TestScheduleMax(t *testing.T) {
	s := NewSchedule(1, time.Minute,
		FaultSpec{Kind: FaultAdd, HoldMin: time.Second, GapMin: time.Second, Max: 1},
		FaultSpec{Kind: FaultRemove, Target: TargetFollower, HoldMin: time.Second, GapMin: time.Second, Max: 2})
	var kinds []FaultKind
	for _, st := range s.Steps {
		kinds = append(kinds, st.Kind)
	}
	want := []FaultKind{FaultAdd, FaultRemove, FaultRemove}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("kinds = %v, want %v", kinds, want)
	}
}

func TestSplitAndBridgeSides(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	for seed := int64(0); seed < 50; seed++ {
		rng := rand.New(rand.NewSource(seed))
		min, maj := SplitSides(rng, nodes)
		if len(min) < 1 || len(min) >= len(maj) || len(min)+len(maj) != 5 {
			t.Fatalf("seed %d: split %v | %v is not minority | majority", seed, min, maj)
		}
		l, b, r := BridgeSides(rng, nodes)
		if len(l) != 2 || len(r) != 2 || b == "" {
			t.Fatalf("seed %d: bridge %v - %s - %v, want 2 - 1 - 2", seed, l, b, r)
		}
	}
	min, maj := SplitSides(rand.New(rand.NewSource(1)), []string{"a", "b", "c"})
	if len(min) != 1 || len(maj) != 2 {
		t.Errorf("3-node split %v | %v, want 1 | 2", min, maj)
	}
}
