package trainer

import (
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// The publisher never blocks its caller, puts records in order, skips the
// ones overtaken while a put was slow, and puts the last one before close
// returns.
func TestPublisherLatestWins(t *testing.T) {
	var mu sync.Mutex
	var got []int64
	gate, started := make(chan struct{}), make(chan struct{})
	p := newPublisher(func(r storage.Record) {
		if r.Step == 1 {
			close(started)
			<-gate // a slow store while steps 2..9 are offered
		}
		mu.Lock()
		got = append(got, r.Step)
		mu.Unlock()
	}, 0)
	p.offer(storage.Record{Step: 1})
	<-started
	for step := int64(2); step <= 9; step++ {
		p.offer(storage.Record{Step: step}) // must not block on the slow put
	}
	close(gate)
	p.close()
	must.Eq(t, 1, got[0])
	must.Eq(t, 9, got[len(got)-1])
	must.Less(t, 4, len(got)) // intermediate records were dropped, not queued
	for i := 1; i < len(got); i++ {
		must.Greater(t, got[i-1], got[i])
	}
}

// A fast training loop gets its first report out at once, then at most one
// put per interval (the latest report), and its last report put by close
// without waiting for the interval.
func TestPublisherSpacesPuts(t *testing.T) {
	const every = 300 * time.Millisecond
	var mu sync.Mutex
	var steps []int64
	var at []time.Time
	p := newPublisher(func(r storage.Record) {
		mu.Lock()
		steps, at = append(steps, r.Step), append(at, time.Now())
		mu.Unlock()
	}, every)
	puts := func(n int) bool {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			got := len(steps)
			mu.Unlock()
			if got >= n {
				return true
			}
			time.Sleep(time.Millisecond)
		}
		return false
	}
	p.offer(storage.Record{Step: 1})
	must.True(t, puts(1))
	p.offer(storage.Record{Step: 2})
	p.offer(storage.Record{Step: 3}) // overtakes 2 while the interval runs
	must.True(t, puts(2))
	p.offer(storage.Record{Step: 4})
	p.close()
	mu.Lock()
	defer mu.Unlock()
	must.Eq(t, []int64{1, 3, 4}, steps)
	// The publisher spaces the starts of its puts; the callback reads the
	// clock a moment after each start, and that moment varies by a few
	// microseconds to milliseconds on a loaded machine (it measured
	// 299.97 ms once). Unspaced, the gap would be about zero.
	must.GreaterEq(t, every-10*time.Millisecond, at[1].Sub(at[0]))
	must.Less(t, every, at[2].Sub(at[1]), must.Sprint("close waited for the interval"))
}
