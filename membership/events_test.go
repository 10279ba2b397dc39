package membership

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestCoalesce(t *testing.T) {
	cases := []struct{ old, next, want EventType }{
		{EventJoin, EventUpdate, EventJoin},
		{EventUpdate, EventUpdate, EventUpdate},
		{EventJoin, EventFailed, EventFailed},
		{EventFailed, EventJoin, EventJoin},
		{EventUpdate, EventLeave, EventLeave},
		{EventLeave, EventJoin, EventJoin},
	}
	for i, c := range cases {
		if got := coalesce(c.old, c.next); got != c.want {
			t.Errorf("#%d: coalesce(%v, %v) = %v, want %v", i, c.old, c.next, got, c.want)
		}
	}
}

// TestEventsCoalesceWhenConsumerLags: with nobody reading, updates pile up without
// blocking memberlist; the reader later gets the latest state of each member and
// fewer events than changes.
func TestEventsCoalesceWhenConsumerLags(t *testing.T) {
	cfg := testConfig("e1")
	cfg.EventBuffer = 1
	m, err := Open(context.Background(), cfg, testMeta("e1"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())

	const updates = 20
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for i := 1; i <= updates; i++ {
		meta := testMeta("e1")
		meta.Release = fmt.Sprintf("v%d", i)
		if err := m.UpdateMeta(ctx, meta); err != nil { // must not block on the full channel
			t.Fatalf("update %d: %v", i, err)
		}
	}
	var got []Event
	for done := false; !done; {
		select {
		case ev := <-m.Events():
			got = append(got, ev)
			done = ev.Member.Meta.Release == fmt.Sprintf("v%d", updates)
		case <-ctx.Done():
			t.Fatalf("latest update never delivered; got %d events", len(got))
		}
	}
	// The local join comes first; if the pump had not taken it yet when the updates
	// came, they coalesced into it (a Join carrying the latest metadata).
	if got[0].Type != EventJoin || got[0].Member.ID() != "e1" {
		t.Errorf("first event = %v %s, want the local join", got[0].Type, got[0].Member.ID())
	}
	if last := got[len(got)-1]; len(got) > 1 && last.Type != EventUpdate {
		t.Errorf("last of %d events has type %v, want update", len(got), last.Type)
	}
	st := m.Stats()
	if len(got) >= updates || st.EventsCoalesced == 0 {
		t.Errorf("got %d events for %d changes, %d coalesced; want coalescing", len(got), updates+1, st.EventsCoalesced)
	}
	if st.EventsDelivered < uint64(len(got)) {
		t.Errorf("EventsDelivered = %d < %d received", st.EventsDelivered, len(got))
	}
}

// TestDeadRetention: dead members stay listed for DeadRetention, then are forgotten.
func TestDeadRetention(t *testing.T) {
	nodes := startCluster(t, "d", 2, func(c *Config) { c.DeadRetention = 500 * time.Millisecond })
	d1, d2 := nodes[0], nodes[1]
	waitFor(t, "d1 to see d2", seesStatus([]*testNode{d1}, "d2", StatusAlive))
	d2.close(t)
	waitFor(t, "d1 to declare d2 dead", seesStatus([]*testNode{d1}, "d2", StatusDead))
	waitFor(t, "d1 to forget d2 after DeadRetention", func() string {
		if m, ok := d1.member("d2"); ok {
			return fmt.Sprintf("still listed, %v for %v", m.Status, time.Since(m.LastChange))
		}
		return ""
	})
	if _, ok := d1.member("d1"); !ok {
		t.Error("d1 lost itself")
	}
}
