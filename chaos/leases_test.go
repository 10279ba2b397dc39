package chaos

import (
	"testing"
	"time"
)

// addLeases writes a correct lease and lock run into the simulated history tl (before
// the nodes' final keyspace is taken from it): lease/abandoned attached at revision
// To/4 and deleted at To/2, the abandoned lease granted TTL before the earliest time
// revision To/2 can have been committed; lease/alive attached at To/8 and kept alive to
// the end; five non-overlapping lock holds with increasing fencing revisions.
func addLeases(tl *Timeline, records []Record) *LeaseLog {
	b := newRevBounds(records)
	put := func(r int64, key string) int64 {
		for ; tl.Changes[r] == nil || tl.Changes[r].Puts == nil; r++ {
		}
		tl.Changes[r].Puts[key] = "lease"
		return r
	}
	lg := &LeaseLog{AliveID: 1, AbandonedID: 2}
	lg.AbandonedPutRev = put(tl.To/4, abandonedKey)
	del := tl.To / 2
	for ; tl.Changes[del] == nil; del++ {
	}
	tl.Changes[del].Deletes = append(tl.Changes[del].Deletes, abandonedKey)
	lg.AbandonedGrantCall = b.After(del) - int64(abandonedTTL)
	lg.AbandonedGrantReturn = lg.AbandonedGrantCall + int64(time.Millisecond)
	lg.AlivePutRev = put(tl.To/8, aliveKey)
	lg.AliveGrantCall = lg.AbandonedGrantReturn
	lg.AliveGrantReturn = lg.AliveGrantCall + int64(time.Millisecond)
	for i := int64(1); i <= 5; i++ {
		call := lg.AliveGrantReturn + i*int64(2*time.Second)
		lg.KeepAlives = append(lg.KeepAlives, KeepAliveAnswer{Call: call, Return: call + int64(time.Millisecond), TTLMillis: 6000})
	}
	for i := int64(0); i < 5; i++ {
		at := i * int64(300*time.Millisecond)
		lg.Holds = append(lg.Holds, LockHold{Client: int(i % 2), Acquired: at, Release: at + int64(lockHold), Fence: 100 + 10*i})
	}
	return lg
}

// The lease and lock checkers' self-test: a key of a kept-alive lease deleted while a
// keepalive promised it, a keepalive answered 404 while promised, the abandoned key
// deleted before its TTL, too late, or never, two holds that overlap (with increasing
// fencing revisions), a fencing revision that decreases, and too few holds must fail; an
// overlap after the earlier holder's session was lost, and a kept-alive lease lost
// (reported) and expired after its last promise, pass.
func TestSelfTestLeases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(d *RunData)
		want    string // "" = must pass
	}{
		{"alive key deleted early", func(d *RunData) {
			r := d.Timeline.To - 10
			for ; d.Timeline.Changes[r] == nil; r++ {
			}
			d.Timeline.Changes[r].Deletes = append(d.Timeline.Changes[r].Deletes, aliveKey)
			by := newRevBounds(d.Records).Before(r)
			d.Leases.KeepAlives = append(d.Leases.KeepAlives, KeepAliveAnswer{Call: by - int64(time.Second), Return: by - int64(time.Second) + 1, TTLMillis: 6000})
		}, "while a keepalive answer had promised its lease"},
		{"alive key deleted, loss never reported", func(d *RunData) {
			r := d.Timeline.To - 10
			for ; d.Timeline.Changes[r] == nil; r++ {
			}
			d.Timeline.Changes[r].Deletes = append(d.Timeline.Changes[r].Deletes, aliveKey)
			d.Leases.KeepAlives = nil
			d.Leases.AliveGrantCall = -int64(time.Hour)
		}, "never reported the lease lost"},
		{"keepalive 404 while promised", func(d *RunData) {
			last := d.Leases.KeepAlives[len(d.Leases.KeepAlives)-1]
			d.Leases.KeepAlives = append(d.Leases.KeepAlives, KeepAliveAnswer{Call: last.Return + 10, Return: last.Return + 20, NotFound: true})
		}, "answered 404"},
		{"abandoned key deleted early", func(d *RunData) {
			d.Leases.AbandonedGrantCall += int64(2 * time.Second)
			d.Leases.AbandonedGrantReturn += int64(2 * time.Second)
		}, "expired early"},
		{"abandoned key deleted late", func(d *RunData) {
			d.Leases.AbandonedGrantCall -= int64(time.Minute)
			d.Leases.AbandonedGrantReturn -= int64(time.Minute)
		}, "expired late"},
		{"abandoned key never deleted", func(d *RunData) {
			for _, ch := range d.Timeline.Changes {
				for i, k := range ch.Deletes {
					if k == abandonedKey {
						ch.Deletes = append(ch.Deletes[:i:i], ch.Deletes[i+1:]...)
						break
					}
				}
			}
		}, "floor: lease/abandoned"},
		{"overlap", func(d *RunData) {
			d.Leases.Holds[2].Acquired = d.Leases.Holds[1].Release - 1
		}, "while client 1 held it"},
		{"overlap after the session was lost", func(d *RunData) {
			d.Leases.Holds[1].SessionLost = true
			d.Leases.Holds[2].Acquired = d.Leases.Holds[1].Release - 1
		}, ""},
		{"alive lease lost after its promise", func(d *RunData) {
			r := d.Timeline.To - 10
			for ; d.Timeline.Changes[r] == nil; r++ {
			}
			d.Timeline.Changes[r].Deletes = append(d.Timeline.Changes[r].Deletes, aliveKey)
			d.Leases.KeepAlives = nil
			d.Leases.AliveGrantCall = -int64(time.Hour)
			d.Leases.Lost = "client: lease lost: no keepalive succeeded in time"
		}, ""},
		{"decreasing fencing revision", func(d *RunData) {
			d.Leases.Holds[3].Fence = d.Leases.Holds[2].Fence - 1
		}, "not above"},
		{"too few holds", func(d *RunData) { d.Leases.Holds = d.Leases.Holds[:2] }, "floor: 2 lock acquisitions"},
		{"setup failed", func(d *RunData) { d.Leases.Err = "grant a 3s lease: 503" }, "leases: grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cleanRun(t)
			tc.corrupt(&d)
			_, _, problems := CheckRun(d, selfTestFloors, time.Minute)
			var got []string
			for _, p := range problems {
				if len(p) >= 5 && (p[:5] == "lease" || p[:5] == "lock:" || p[:5] == "floor") {
					got = append(got, p)
				}
			}
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("want a pass, got %q", got)
				}
				return
			}
			wantFailure(t, tc.name, got, tc.want)
		})
	}
}

// An unknown put is not taken for a partial txn because a key outside the prefix (a
// lock waiter's key) holds an empty value, as a put's Value2 is.
func TestResolveIgnoresEmptyValuesOutsidePrefix(t *testing.T) {
	tl := &Timeline{From: 1, To: 2, Changes: map[int64]*RevChange{
		1: {Puts: map[string]string{"k/0": "v1"}},
		2: {Puts: map[string]string{lockName + "/00000001": ""}},
	}}
	records := []Record{{ID: 1, Kind: OpPut, Key: "k/0", Value: "v1", Call: 1, Return: 2, Outcome: OutcomeUnknown}}
	out, v := Resolve(records, tl, "k/")
	if len(v) != 0 {
		t.Fatalf("violations %q, want none", v)
	}
	if out[0].Outcome != OutcomeOK || out[0].Rev != 1 {
		t.Fatalf("the unknown put resolved to %v at %d, want OK at 1", out[0].Outcome, out[0].Rev)
	}
}
