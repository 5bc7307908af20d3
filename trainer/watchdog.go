package trainer

import (
	"slices"
	"sync"
	"time"
)

// watchdog notices a gang that stopped making progress: no collective
// completed for longer than max(floor, factor × the median time between
// completions). A frozen or looping peer leaves the others blocked in a
// collective; this gets them out long before a fixed network timeout would,
// and scales with the job: a step of 50 ms and a step of 5 minutes both get
// a limit in proportion.
type watchdog struct {
	floor  time.Duration
	factor float64

	mu        sync.Mutex // guards below
	last      time.Time
	intervals []time.Duration // the most recent intervals, oldest first
}

const watchdogWindow = 64

func newWatchdog(floor time.Duration, factor float64, now time.Time) *watchdog {
	return &watchdog{floor: floor, factor: factor, last: now}
}

// progress records that a collective completed at now.
func (w *watchdog) progress(now time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := now.Sub(w.last); d > 0 {
		if len(w.intervals) == watchdogWindow {
			w.intervals = w.intervals[1:]
		}
		w.intervals = append(w.intervals, d)
	}
	w.last = now
}

// limit is how long the gang may go without progress.
func (w *watchdog) limit() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return stallLimit(w.intervals, w.floor, w.factor)
}

// stalled reports how long there has been no progress at now, and whether
// that is past the limit.
func (w *watchdog) stalled(now time.Time) (since, limit time.Duration, hung bool) {
	w.mu.Lock()
	since = now.Sub(w.last)
	w.mu.Unlock()
	limit = w.limit()
	return since, limit, since > limit
}

// stallLimit is max(floor, factor × median(intervals)).
func stallLimit(intervals []time.Duration, floor time.Duration, factor float64) time.Duration {
	if len(intervals) == 0 {
		return floor
	}
	s := slices.Clone(intervals)
	slices.Sort(s)
	median := s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return max(floor, time.Duration(factor*float64(median)))
}
