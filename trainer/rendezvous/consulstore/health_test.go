package consulstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
)

// healthTTL is long enough that a loaded CI machine still delivers an
// update within a TTL; the update loop sends one every TTL/3.
const healthTTL = 600 * time.Millisecond

// registered registers service id with a TTL check of ttl on a fresh fake
// agent, and returns it with a reader of the check's state.
func registered(t *testing.T, ctx context.Context, id string, ttl time.Duration) (*fakeconsul.Server, *consulstore.Health, func() fakeconsul.Check) {
	t.Helper()
	fake := fakeconsul.New(fakeconsul.Options{})
	t.Cleanup(fake.Close)
	client, _, err := consulstore.NewClient(fake.Addr())
	must.NoError(t, err)
	h := consulstore.NewHealth(client, consulstore.HealthOptions{Tags: []string{"run1"}})
	must.NoError(t, h.Register(ctx, "trainer", id, "10.0.0.1", 29500, ttl))
	return fake, h, func() fakeconsul.Check {
		c, ok := fake.CheckState(consulstore.CheckID(id))
		must.True(t, ok)
		return c
	}
}

func TestHealthTTLCheckFollowsBeats(t *testing.T) {
	const ttl = healthTTL
	ctx := ctxFor(t, 20*time.Second)
	fake, h, check := registered(t, ctx, "run1-rank0", ttl)
	must.ErrorIs(t, h.Register(ctx, "trainer", "run1-rank0", "10.0.0.1", 29500, ttl), consulstore.ErrRegistered)
	svc, ok := fake.Service("run1-rank0")
	must.True(t, ok)
	must.Eq(t, fakeconsul.Service{ID: "run1-rank0", Name: "trainer", Address: "10.0.0.1", Port: 29500,
		CheckIDs: []string{consulstore.CheckID("run1-rank0")}}, svc)
	must.Eq(t, "passing", check().Status, must.Sprint("a fresh worker starts passing"))

	// A training loop that steps keeps the check passing well past its TTL.
	var hb consulstore.Heartbeat = h
	end := time.Now().Add(3 * ttl)
	for step := int64(1); time.Now().Before(end); step++ {
		hb.Beat(step)
		time.Sleep(5 * time.Millisecond)
		must.Eq(t, "passing", check().Status, must.Sprintf("critical while stepping (step %d)", step))
	}
	c := check()
	must.StrHasPrefix(t, "step ", c.Output)
	// Beats are coalesced: about one update per TTL/3, not one per step.
	must.Between(t, 3, c.Updates, 12)

	// A hung loop (no more beats) turns critical one TTL later.
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Status == "critical" }))

	// Beats again: passing again.
	h.Beat(1000)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Output == "step 1000" }))
	must.Eq(t, "passing", check().Status)

	must.NoError(t, h.Deregister(ctx))
	_, ok = fake.Service("run1-rank0")
	must.False(t, ok, must.Sprint("service left behind after Deregister"))
	must.NoError(t, h.Deregister(ctx), must.Sprint("second Deregister is a no-op"))
	h.Beat(1001) // after Deregister: nothing to update, no panic
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
	const ttl = healthTTL
	ctx := ctxFor(t, 20*time.Second)
	_, h, check := registered(t, ctx, "run1-rank1", ttl)
	defer h.Deregister(ctx)

	done := h.Waiting("waiting for the gang (4 workers)")
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		must.Eq(t, "passing", check().Status, must.Sprint("critical while waiting for the gang"))
		time.Sleep(20 * time.Millisecond)
	}
	must.Eq(t, "waiting for the gang (4 workers)", check().Output)

	done()
	h.Beat(7)
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Output == "step 7" }))
	// No more beats and no wait: a hung worker turns critical again.
	must.True(t, fakeconsul.WaitFor(ctx, func() bool { return check().Status == "critical" }))
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
