package objstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// The backoff of Config.RetryFor's retries: retryBase after the first
// failure, doubling up to retryCap, each wait drawn within a quarter of
// its nominal value either way.
const (
	retryBase = 200 * time.Millisecond
	retryCap  = 2 * time.Second
)

// outageRetryer is the SDK's standard retryer (which errors are worth a
// retry) with attempts enough for about d of backoff, no retry quota (the
// quota's token bucket, shared by a client's requests, would fail every
// request at once some seconds into an outage), and no retry begun once
// d has passed since the operation began: attempts that each wait out a
// stall or a dial's timeout would otherwise take many times d.
func outageRetryer(d time.Duration, onRetry func(int, error, time.Duration)) aws.Retryer {
	return retryUntil{d: d, RetryerV2: retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attemptsFor(d)
		o.Backoff = outageBackoff{onRetry: onRetry}
		o.RateLimiter = ratelimit.None
	})}
}

// retryUntil refuses a retry once d has passed since the operation began
// (as requestClock noted it).
type retryUntil struct {
	aws.RetryerV2
	d time.Duration
}

func (r retryUntil) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	if start, ok := ctx.Value(startKey{}).(time.Time); ok {
		if spent := time.Since(start); spent >= r.d {
			return nil, &retriedError{err: opErr, spent: spent}
		}
	}
	return r.RetryerV2.GetRetryToken(ctx, opErr)
}

// retriedError is an attempt's error after retries ran out of time. The
// SDK joins it to that error, a line apart; requestClock puts it in the
// join's place.
type retriedError struct {
	err   error
	spent time.Duration
}

func (e *retriedError) Error() string {
	return fmt.Sprintf("%v (gave up retrying after %v)", e.err, e.spent.Round(time.Millisecond))
}
func (e *retriedError) Unwrap() error { return e.err }

// nominalWait is the wait after failed attempt n (from 1), before jitter.
func nominalWait(n int) time.Duration {
	if n >= 5 { // 200ms << 4 is past the cap already
		return retryCap
	}
	return min(retryBase<<(n-1), retryCap)
}

// attemptsFor is the number of attempts whose nominal waits add up to at
// least d: 1 + enough retries.
func attemptsFor(d time.Duration) int {
	n, waited := 1, time.Duration(0)
	for waited < d {
		waited += nominalWait(n)
		n++
	}
	return n
}

// outageBackoff waits nominalWait(attempt), give or take a quarter.
type outageBackoff struct {
	onRetry func(int, error, time.Duration)
}

func (b outageBackoff) BackoffDelay(attempt int, err error) (time.Duration, error) {
	w := nominalWait(attempt)
	w += time.Duration((rand.Float64() - 0.5) * float64(w) / 2)
	if b.onRetry != nil {
		b.onRetry(attempt, err, w)
	}
	return w, nil
}
