package migrate

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/versions"
)

// progressTolerance is how far a reported rate may be from the rate limit, and a
// predicted finish from the real one (relative, with a floor for the ETA).
const (
	progressTolerance = 0.30
	etaFloor          = 600 * time.Millisecond
)

// progressReading is what a watcher saw once the rate was measured for a while.
type progressReading struct {
	rate     float64
	eta      time.Duration
	finishBy time.Time // the record's Updated + its ETA
}

func reading(rate, etaSeconds float64, updated time.Time) progressReading {
	eta := time.Duration(etaSeconds * float64(time.Second))
	return progressReading{rate: rate, eta: eta, finishBy: updated.Add(eta)}
}

// checkProgress asserts the reading against the limit and the real finish.
func checkProgress(t *testing.T, what string, limit float64, got progressReading, finished time.Time) {
	t.Helper()
	if got.rate < limit*(1-progressTolerance) || got.rate > limit*(1+progressTolerance) {
		t.Errorf("%s: reported %.0f/s at a limit of %.0f/s (want within ±%.0f%%)", what, got.rate, limit,
			progressTolerance*100)
	}
	tol := time.Duration(math.Max(float64(etaFloor), progressTolerance*float64(got.eta)))
	if d := finished.Sub(got.finishBy); d < -tol || d > tol {
		t.Errorf("%s: the ETA promised the end at %s, it came at %s (off by %v, tolerance %v)", what,
			got.finishBy.Format("15:04:05.000"), finished.Format("15:04:05.000"), d, tol)
	}
	t.Logf("%s: %.0f/s at a limit of %.0f/s; finish predicted %s, real %s", what, got.rate, limit,
		got.finishBy.Format("15:04:05.000"), finished.Format("15:04:05.000"))
}

// TestMigrateProgressHonest: a migration of 600 objects at a rate limit of 200/s (chunks
// of 20) reports, once it has run a second, a rate within 30% of 200/s and an ETA the
// migration then meets (within 30%, at least 0.6 s). It runs the migrator's own loop
// on a real one-node Raft cluster (about 3 s).
//
// Kills: the rate of one chunk's burst (the time from the last checkpoint to the next
// scan, before the limiter's wait: thousands per second), and a limiter that starts
// with a second's worth of tokens.
func TestMigrateProgressHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rate-limited migration for about 3 s")
	}
	f := newFixture(t)
	f.putV1(600)
	const limit = 200
	m, err := New(Config{Schema: f.schema, Store: f.n, Rate: limit, Chunk: 20, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.Start()
	defer m.Close()
	var got progressReading
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		st, err := ReadStatus(f.n.Store().View(), f.res.Key())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case st == nil:
		case st.State == StateSucceeded:
			if got.rate == 0 {
				t.Fatalf("the migration ended without ever reporting a rate: %+v", st)
			}
			checkProgress(t, "migrate", limit, got, st.Finished)
			return
		case st.State == StateRunning && got.rate == 0 && st.ObjectsPerSecond > 0 &&
			time.Since(st.Started) > 1200*time.Millisecond:
			got = reading(st.ObjectsPerSecond, st.ETASeconds, st.Updated)
			if st.ETASeconds <= 0 {
				t.Fatalf("running with %d of %d scanned, but no ETA: %+v", st.PassScanned, st.Total, st)
			}
		case st.State == StateRunning && st.ObjectsPerSecond > limit*(1+progressTolerance):
			t.Fatalf("reported %.0f/s at a limit of %d/s (%d of %d scanned)", st.ObjectsPerSecond, limit,
				st.PassScanned, st.Total)
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("the migration did not finish in 20 s")
}

// TestKeyCopyProgressHonest: the copy of phase 3 of a key migration (500 keys at
// 200/s, chunks of 20) reports its rate and ETA as honestly as the migrator does.
//
// Kills: a rate averaged over chunks rather than time (12k/s at a limit of 200/s).
func TestKeyCopyProgressHonest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a rate-limited copy for about 2.5 s")
	}
	f := newKeyFixture(t)
	f.seed(500)
	for to := 1; to <= api.KeyPhaseCopy; to++ {
		if err := f.advance(to); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 200
	m, err := New(Config{Schema: f.schema, Store: f.n, Rate: limit, Chunk: 20})
	if err != nil {
		t.Fatal(err)
	}
	var got progressReading
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := m.KeyStep(context.Background(), f.k); err != nil {
			t.Fatal(err)
		}
		w, err := versions.ReadKeyWork(f.view(), f.k.Name)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case w == nil:
		case w.State == "Done":
			if got.rate == 0 {
				t.Fatalf("the copy ended without ever reporting a rate: %+v", w)
			}
			checkProgress(t, "key copy", limit, got, w.Finished)
			return
		case got.rate == 0 && w.KeysPerSecond > 0 && time.Since(w.Started) > 1200*time.Millisecond:
			got = reading(w.KeysPerSecond, w.ETASeconds, w.Updated)
		case w.KeysPerSecond > limit*(1+progressTolerance):
			t.Fatalf("reported %.0f/s at a limit of %d/s (%d of %d scanned)", w.KeysPerSecond, limit, w.Scanned, w.Total)
		}
	}
	t.Fatal("the copy did not finish in 20 s")
}

// TestMigrateReasonNamesHashes: a migration says why it started in the KEP's terms:
// the storage version hashes stored objects have and the current one (the hash the
// discovery document serves), with the versions for people.
//
// Kills: a migration record without its reason, or with names only.
func TestMigrateReasonNamesHashes(t *testing.T) {
	f := newFixture(t)
	f.putV1(3)
	m := f.migrator(Config{})
	st := f.stepUntil(m, StateSucceeded)
	want := "storage version hash changed from " + versions.StorageVersionHash("apps/widgets", "v1") +
		" (apps/v1) to " + versions.StorageVersionHash("apps/widgets", "v2") + " (apps/v2)"
	if st.Reason != want {
		t.Fatalf("reason %q, want %q", st.Reason, want)
	}
}
