package credentials

import (
	"context"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Refresher defaults.
const (
	DefaultMinWait    = time.Second
	DefaultMaxBackoff = 30 * time.Second
)

// Refresher keeps a long session's credential fresh: when half of the
// current credential's remaining life has passed, it mints a new one and
// hands it to Write (e.g. FileWriter, which replaces the delivered file).
// Failures are retried with exponential backoff (MinWait, doubling, at most
// MaxBackoff), and before the credential expires at least once per half of
// its remaining life.
type Refresher struct {
	// Refresh mints the next credential.
	Refresh func(ctx context.Context) (*Credential, error)
	// Write delivers it.
	Write func(ctx context.Context, c *Credential) error
	// Clock defaults to clock.Real.
	Clock clock.Clock
	// MinWait is the shortest wait between refreshes (default DefaultMinWait).
	MinWait time.Duration
	// MaxBackoff caps the wait between failed attempts (default DefaultMaxBackoff).
	MaxBackoff time.Duration
}

// Refresher returns a Refresher for credential name of session that
// re-mints through b and delivers with write.
func (b *Broker) Refresher(session, name string, write func(context.Context, *Credential) error) *Refresher {
	return &Refresher{
		Refresh: func(ctx context.Context) (*Credential, error) { return b.Refresh(ctx, session, name) },
		Write:   write,
		Clock:   b.clock,
	}
}

// RefreshAfter returns how long to wait before refreshing a credential that
// expires at expiry: half its remaining life, and at least minWait.
func RefreshAfter(now, expiry time.Time, minWait time.Duration) time.Duration {
	return max(expiry.Sub(now)/2, minWait)
}

// Run refreshes cur and its successors until ctx is done, returning
// ctx.Err(), or until Refresh reports that the credential no longer exists
// (errdefs.IsNotFound: the session was revoked), returning that error.
func (r *Refresher) Run(ctx context.Context, cur *Credential) error {
	clk := r.Clock
	if clk == nil {
		clk = clock.Real
	}
	minWait := r.MinWait
	if minWait <= 0 {
		minWait = DefaultMinWait
	}
	maxBackoff := r.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	// backoff is the base wait after a failed attempt, zero after a
	// success. It doubles from the wait actually used, so attempts crowded
	// into the last seconds before expiry keep it short.
	var backoff time.Duration
	for {
		now := clk.Now()
		wait := RefreshAfter(now, cur.Expiry, minWait)
		if backoff > 0 {
			if now.Before(cur.Expiry) {
				wait = max(min(backoff, wait), minWait)
			} else {
				wait = backoff
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(wait):
		}
		next, err := r.Refresh(ctx)
		if err == nil {
			err = r.Write(ctx, next)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errdefs.IsNotFound(err) {
				return err
			}
			if backoff == 0 {
				backoff = minWait
			} else {
				backoff = min(2*wait, maxBackoff)
			}
			log.G(ctx).Warn("credential refresh failed", "name", cur.Name, "expires", cur.Expiry,
				"error", err)
			continue
		}
		cur, backoff = next, 0
	}
}
