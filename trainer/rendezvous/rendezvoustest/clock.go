package rendezvoustest

import (
	"sort"
	"sync"
	"time"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
)

// FakeClock is a rendezvous.Clock that moves only when told. Timers fire
// synchronously inside Advance, in due order, so tests are deterministic.
type FakeClock struct {
	mu sync.Mutex
	// guarded by mu:
	now    time.Time
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	c   *FakeClock
	at  time.Time
	seq int
	f   func()
}

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now implements rendezvous.Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements rendezvous.Clock. A timer already due fires on the
// next Advance.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) rendezvous.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop implements rendezvous.Timer.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, o := range t.c.timers {
		if o == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock by d, firing every timer that falls due, earliest
// first, each at its own time. Timers set by a firing timer fire too if they
// fall due within d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			if !c.timers[i].at.Equal(c.timers[j].at) {
				return c.timers[i].at.Before(c.timers[j].at)
			}
			return c.timers[i].seq < c.timers[j].seq
		})
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Pending returns how many timers are set and not yet fired or stopped, so
// a test can wait until the code under test is waiting on the clock before
// it advances it.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
