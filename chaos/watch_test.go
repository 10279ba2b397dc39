package chaos

import (
	"testing"
)

// faithfulWatch is what a correct watcher of k/ started at revision start receives
// from the history tl: every event, once, in order, up to date through its end.
func faithfulWatch(id int, tl *Timeline, start int64) WatchLog {
	evs := historyEvents(tl, "k/", start, tl.To)
	return WatchLog{ID: id, Segments: []WatchSegment{{Start: start, Through: tl.To, Events: evs}}}
}

// The watch checker's self-test. A watcher's events, drawn for the history
//
//	rev r1: put k/a    rev r2: put k/b, put k/c (one txn)    rev r3: delete k/a ...
//
// fail when one event is missing (a gap), delivered twice, or swapped with the next
// revision's; a watcher that stopped early, received too little, or whose watch ended
// for good fails too. A compacted start followed by a relist (two segments) passes.
func TestSelfTestWatch(t *testing.T) {
	evs := func(d RunData) []WatchedEvent { return d.Watches[1].Segments[0].Events }
	set := func(d *RunData, e []WatchedEvent) { d.Watches[1].Segments[0].Events = e }
	for _, tc := range []struct {
		name    string
		corrupt func(d *RunData)
		want    string
	}{
		{"gap", func(d *RunData) {
			e := evs(*d)
			i := len(e) / 2
			set(d, append(append([]WatchedEvent(nil), e[:i]...), e[i+1:]...))
		}, "gap: event #"},
		{"gap at the end", func(d *RunData) {
			e := evs(*d)
			set(d, e[:len(e)-1])
		}, "gap: 1 events of the history never received"},
		{"duplicate", func(d *RunData) {
			e := evs(*d)
			i := len(e) / 2
			set(d, append(append(append([]WatchedEvent(nil), e[:i+1]...), e[i]), e[i+1:]...))
		}, "duplicate: event"},
		{"reordered", func(d *RunData) {
			e := append([]WatchedEvent(nil), evs(*d)...)
			i := len(e) / 2
			for e[i].Rev == e[i+1].Rev {
				i++
			}
			e[i], e[i+1] = e[i+1], e[i]
			set(d, e)
		}, "out of order: event"},
		{"phantom", func(d *RunData) {
			e := append([]WatchedEvent(nil), evs(*d)...)
			e[3].Value = "nobody"
			set(d, e)
		}, "is not in the history"},
		{"not caught up", func(d *RunData) { d.Watches[0].Segments[0].Through = d.Timeline.To - 1 }, "not caught up"},
		{"ended", func(d *RunData) { d.Watches[0].Err = "watch ended: 400" }, "watcher 0: watch ended: 400"},
		{"no watchers", func(d *RunData) { d.Watches = nil }, "floor: 0 watchers ran"},
		{"too few events", func(d *RunData) {
			tl := d.Timeline
			d.Watches[1] = faithfulWatch(1, tl, tl.To-2)
		}, "floor: watcher 1 received"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cleanRun(t)
			tc.corrupt(&d)
			wantFailure(t, tc.name, verdict(t, d), tc.want)
		})
	}
}

// A gap a watcher was told about (a compacted start, then a relist and a new
// segment) is no gap; the resumes are counted.
func TestSelfTestWatchCompactedRestartPasses(t *testing.T) {
	d := cleanRun(t)
	tl := d.Timeline
	a, b := faithfulWatch(1, tl, tl.To/3), faithfulWatch(1, tl, tl.To/2)
	seg := a.Segments[0]
	seg.Through = tl.To * 2 / 5
	var kept []WatchedEvent
	for _, e := range seg.Events {
		if e.Rev <= seg.Through {
			kept = append(kept, e)
		}
	}
	seg.Events = kept
	d.Watches[1] = WatchLog{ID: 1, Segments: []WatchSegment{seg, b.Segments[0]}, Compacted: 1, Resumes: 4, Slow: 1}
	if got := verdict(t, d); len(got) != 0 {
		t.Fatalf("compacted restart: %q", got)
	}
	counts, _ := CheckWatches(d.Watches, tl, "k/", selfTestFloors)
	if counts.Compacted != 1 || counts.Resumes != 4 || counts.Slow != 1 || counts.Watchers != 2 {
		t.Fatalf("counts %+v, want 1 compacted, 4 resumes, 1 slow, 2 watchers", counts)
	}
}
