package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the wait before retry number attempt+1: exponential from MinBackoff,
// capped at MaxBackoff, with jitter in [d/2, d] so that many clients that failed
// together do not retry together. A server's Retry-After raises it, up to MaxBackoff.
func (c *Client) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.opts.MinBackoff << min(attempt, 16)
	if d > c.opts.MaxBackoff || d <= 0 {
		d = c.opts.MaxBackoff
	}
	d = d/2 + rand.N(d/2+1)
	if retryAfter > d {
		d = min(retryAfter, c.opts.MaxBackoff)
	}
	return d
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
