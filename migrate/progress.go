package migrate

import (
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Rates and ETAs both migrators report (objects per second, keys per second) are
// measured over wall-clock time, from checkpoints kept in the status record: each
// chunk's checkpoint adds (time, objects done so far), and the rate is what was done
// between the oldest checkpoint of the last rateWindow and the newest, divided by the
// time between them. So a chunk that went out at once on the limiter's burst counts
// for what it is, one chunk in several seconds, and the rate a limit of 150/s allows
// reads 150/s, not the speed of one burst. Because the checkpoints are in the record, a
// new leader goes on measuring where the old one stopped.
const (
	// rateWindow is how far back the rate looks.
	rateWindow = 5 * time.Second
	// rateMinSpan is the least time measured before a rate is reported (until then: 0,
	// shown as "?").
	rateMinSpan = time.Second
	// rateGap: checkpoints further apart than this (a pause, an abort, a new leader
	// after a while) start the measurement afresh.
	rateGap = 10 * time.Second
	// sampleSpacing thins the checkpoints: a new one closer than this to the one
	// before the last replaces the last, so the record holds at most about
	// rateWindow/sampleSpacing of them however fast chunks go.
	sampleSpacing = 250 * time.Millisecond
	maxSamples    = 32
)

// observe adds the checkpoint (now, done) to samples and returns them, trimmed to the
// window (keeping one sample at or before its start, the anchor).
func observe(samples []api.ProgressSample, done int64, now time.Time) []api.ProgressSample {
	s := api.ProgressSample{At: now.UTC(), Done: done}
	n := len(samples)
	switch {
	case n == 0, now.Sub(samples[n-1].At) > rateGap, now.Before(samples[n-1].At), done < samples[n-1].Done:
		return []api.ProgressSample{s}
	case n >= 2 && now.Sub(samples[n-2].At) < sampleSpacing:
		samples = append([]api.ProgressSample(nil), samples...)
		samples[n-1] = s
	default:
		samples = append(append([]api.ProgressSample(nil), samples...), s)
	}
	// Drop samples older than the window, keeping the newest one before it.
	cut := 0
	for cut+1 < len(samples) && now.Sub(samples[cut+1].At) >= rateWindow {
		cut++
	}
	samples = samples[cut:]
	if len(samples) > maxSamples {
		samples = samples[len(samples)-maxSamples:]
	}
	return samples
}

// rateOf is the rate the samples show (per second), 0 while they span less than
// rateMinSpan.
func rateOf(samples []api.ProgressSample) float64 {
	if len(samples) < 2 {
		return 0
	}
	first, last := samples[0], samples[len(samples)-1]
	span := last.At.Sub(first.At)
	if span < rateMinSpan {
		return 0
	}
	return float64(last.Done-first.Done) / span.Seconds()
}

// etaOf is the time left objects take at rate (0 when either is unknown or none).
func etaOf(left int64, rate float64) float64 {
	if left <= 0 || rate <= 0 {
		return 0
	}
	return float64(left) / rate
}
