package consulstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
)

// registered registers service id with a TTL check of ttl on a fresh fake
// agent, and returns it with a reader of the check's state.
func registered(t *testing.T, ctx context.Context, id string, ttl time.Duration) (*fakeconsul.Server, *consulstore.Health, func() fakeconsul.Check) {
	t.Helper()
	return registeredOn(t, ctx, nil, id, ttl)
}

// registeredOn is registered with clock (nil: the wall clock) driving both
// the agent's TTLs and the update loop's pace.
func registeredOn(t *testing.T, ctx context.Context, clock *rendezvoustest.FakeClock, id string, ttl time.Duration) (*fakeconsul.Server, *consulstore.Health, func() fakeconsul.Check) {
	t.Helper()
	opts := fakeconsul.Options{}
	hopts := consulstore.HealthOptions{Tags: []string{"run1"}}
	if clock != nil {
		opts.Clock, hopts.Clock = clock, clock
	}
	fake := fakeconsul.New(opts)
	t.Cleanup(fake.Close)
	client, _, err := consulstore.NewClient(fake.Addr())
	must.NoError(t, err)
	h := consulstore.NewHealth(client, hopts)
	must.NoError(t, h.Register(ctx, "trainer", id, "10.0.0.1", 29500, ttl))
	return fake, h, func() fakeconsul.Check {
		c, ok := fake.CheckState(consulstore.CheckID(id))
		must.True(t, ok)
		return c
	}
}

// A fake clock drives both the agent's TTL and the update loop, so the
// test waits on what happened (an update, the loop pausing on the clock),
// never on how fast the machine is.
func TestHealthTTLCheckFollowsBeats(t *testing.T) {
	const ttl = 30 * time.Second
	const every = ttl / 3 // the loop's least spacing of updates
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	ctx := ctxFor(t, 20*time.Second)
	fake, h, check := registeredOn(t, ctx, clock, "run1-rank0", ttl)
	must.ErrorIs(t, h.Register(ctx, "trainer", "run1-rank0", "10.0.0.1", 29500, ttl), consulstore.ErrRegistered)
	svc, ok := fake.Service("run1-rank0")
	must.True(t, ok)
	must.Eq(t, fakeconsul.Service{ID: "run1-rank0", Name: "trainer", Address: "10.0.0.1", Port: 29500,
		Tags: []string{"run1"}, Weights: fakeconsul.Weights{Passing: 1, Warning: 1},
		CheckIDs: []string{consulstore.CheckID("run1-rank0")}}, svc)
	must.Eq(t, "passing", check().Status, must.Sprint("a fresh worker starts passing"))
	// paused waits until the loop has sent n updates and waits on the clock.
	paused := func(n int) {
		t.Helper()
		must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Updates == n && clock.Pending() == 1 }),
			must.Sprintf("update %d never came (%d so far)", n, check().Updates))
	}

	var hb consulstore.Heartbeat = h
	step := int64(1)
	hb.Beat(step)
	paused(1)
	must.Eq(t, "step 1", check().Output)
	// A training loop that steps keeps the check passing for two TTLs:
	// the many beats of each pause are one update, sent when it ends.
	for n := 2; n <= 7; n++ {
		for range 20 {
			step++
			hb.Beat(step)
		}
		must.Eq(t, n-1, check().Updates, must.Sprint("a beat during the pause sent an update"))
		clock.Advance(every)
		paused(n)
		c := check()
		must.Eq(t, "passing", c.Status, must.Sprintf("critical while stepping (update %d)", n))
		must.Eq(t, fmt.Sprintf("step %d", step), c.Output)
	}

	// A hung loop (no more beats) sends nothing and turns critical just
	// over one TTL after its last update.
	clock.Advance(every)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return clock.Pending() == 0 }))
	clock.Advance(ttl - every)
	must.Eq(t, "passing", check().Status, must.Sprint("critical before the TTL ran out"))
	must.Eq(t, 7, check().Updates)
	clock.Advance(time.Millisecond)
	must.Eq(t, "critical", check().Status)

	// Beats again: passing again, at once.
	h.Beat(1000)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Output == "step 1000" }))
	must.Eq(t, "passing", check().Status)

	must.NoError(t, h.Deregister(ctx))
	_, ok = fake.Service("run1-rank0")
	must.False(t, ok, must.Sprint("service left behind after Deregister"))
	must.NoError(t, h.Deregister(ctx), must.Sprint("second Deregister is a no-op"))
	h.Beat(1001) // after Deregister: nothing to update, no panic
}

// An agent that restarts empty forgets the worker's service: the next
// update fails, and the one after registers the service again, so the
// check is back (and passing) without the worker doing anything.
func TestHealthRegistersAgainAfterAgentRestart(t *testing.T) {
	const ttl = 30 * time.Second
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	ctx := ctxFor(t, 20*time.Second)
	fake, h, _ := registeredOn(t, ctx, clock, "run1-rank3", ttl)
	defer h.Deregister(ctx)
	h.Beat(1)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return clock.Pending() == 1 }))

	fake.Stop()
	must.NoError(t, fake.Start())
	_, ok := fake.Service("run1-rank3")
	must.False(t, ok, must.Sprint("the restarted agent kept the service"))

	h.Beat(2)
	clock.Advance(ttl / 3) // the update fails: the agent knows no such check
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return clock.Pending() == 1 }))
	_, ok = fake.Service("run1-rank3")
	must.False(t, ok)
	h.Beat(3)
	clock.Advance(ttl / 3)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool {
		c, ok := fake.CheckState(consulstore.CheckID("run1-rank3"))
		return ok && c.Output == "step 3" && c.Status == "passing"
	}), must.Sprint("the service was not registered again"))
	svc, ok := fake.Service("run1-rank3")
	must.True(t, ok)
	must.Eq(t, "trainer", svc.Name)

	// Told the agent lost it, the loop registers it again with the next
	// beat, not at the next update. (The first request after the restart
	// may fail on a connection the old agent closed; then the retry comes
	// a second later.)
	fake.Stop()
	must.NoError(t, fake.Start())
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return clock.Pending() == 1 }))
	h.Reregister()
	h.Beat(4)
	var advanced time.Duration
	must.True(t, fakeconsul.WaitFor(ctx, func() bool {
		if c, ok := fake.CheckState(consulstore.CheckID("run1-rank3")); ok && c.Output == "step 4" {
			return true
		}
		h.Beat(4) // a training loop beats on
		if clock.Pending() == 1 {
			clock.Advance(time.Second)
			advanced += time.Second
		}
		return false
	}))
	must.Less(t, ttl/3, advanced, must.Sprint("Reregister waited for the next update"))
}

func TestHealthRegisterErrors(t *testing.T) {
	fake := fakeconsul.New(fakeconsul.Options{})
	defer fake.Close()
	client, _, err := consulstore.NewClient(fake.Addr())
	must.NoError(t, err)
	ctx := context.Background()
	h := consulstore.NewHealth(client, consulstore.HealthOptions{})
	must.Error(t, h.Register(ctx, "trainer", "x", "", 0, 0))
	must.Error(t, h.Register(ctx, "", "x", "", 0, time.Second), must.Sprint("the agent refuses a service without a name"))
	must.NoError(t, h.Deregister(ctx))
}

// A worker waiting for its gang takes no steps but is not hung: Waiting
// keeps its check passing, saying so, and beats take over after done.
func TestHealthWaitingStaysPassing(t *testing.T) {
	const ttl = 30 * time.Second
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	ctx := ctxFor(t, 20*time.Second)
	_, h, check := registeredOn(t, ctx, clock, "run1-rank1", ttl)
	defer h.Deregister(ctx)

	const reason = "waiting for the gang (4 workers)"
	done := h.Waiting(reason)
	for n := 1; n <= 7; n++ { // two TTLs without a step
		must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Updates == n && clock.Pending() == 1 }))
		c := check()
		must.Eq(t, "passing", c.Status, must.Sprint("critical while waiting for the gang"))
		must.Eq(t, reason, c.Output)
		clock.Advance(ttl / 3)
	}

	done()
	h.Beat(7)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Output == "step 7" }))
	// No more beats and no wait: a hung worker turns critical again.
	clock.Advance(ttl + time.Millisecond)
	must.Eq(t, "critical", check().Status)
}

// With a TTL of minutes, updates are tens of seconds apart; a wait that
// begins or ends still shows at once, not at the next update.
func TestHealthWaitingShowsAtOnce(t *testing.T) {
	ctx := ctxFor(t, 20*time.Second)
	_, h, check := registered(t, ctx, "run1-rank2", 2*time.Minute)
	defer h.Deregister(ctx)
	soon := func(output string) bool {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return fakeconsul.WaitFor(wctx, func() bool { return check().Output == output })
	}
	h.Beat(1)
	must.True(t, soon("step 1"))
	done := h.Waiting("waiting for the gang (4 workers)")
	must.True(t, soon("waiting for the gang (4 workers)"), must.Sprint("the wait waited for the next update"))
	done()
	h.Beat(2)
	must.True(t, soon("step 2"), must.Sprint("the first step after the wait waited for the next update"))
}
