package consulstore_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/consulstore/fakeconsul"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/rendezvoustest"
)

// newStore connects a fresh Store (its own client and connections, as
// another process would have) to the agent at addr.
func newStore(t *testing.T, cfg consulstore.Config) *consulstore.Store {
	t.Helper()
	st, err := consulstore.New(cfg)
	must.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// fakeFixture is the fake agent on a fake clock with Consul's real minimum
// TTL (10s) and its 2×TTL expiry.
func fakeFixture(t *testing.T) rendezvoustest.Fixture {
	return fakeClockFixture(t, false, consulstore.Config{WaitTime: 2 * time.Second})
}

// spuriousFakeFixture is fakeFixture with every blocking query returning
// early with nothing changed.
func spuriousFakeFixture(t *testing.T) rendezvoustest.Fixture {
	return fakeClockFixture(t, true, consulstore.Config{RetryPause: 20 * time.Millisecond})
}

func fakeClockFixture(t *testing.T, spurious bool, cfg consulstore.Config) rendezvoustest.Fixture {
	clock := rendezvoustest.NewFakeClock(time.Unix(1_700_000_000, 0))
	fake := fakeconsul.New(fakeconsul.Options{Clock: clock})
	fake.Spurious.Store(spurious)
	t.Cleanup(fake.Close)
	cfg.Address = fake.Addr()
	return rendezvoustest.Fixture{
		Connect: func(t *testing.T) rendezvous.Store { return newStore(t, cfg) },
		Advance: clock.Advance,
		TTL:     consulstore.DefaultMinTTL,
		Expiry:  consulstore.DefaultMinTTL,
	}
}

// wallFakeFixture is the fake agent on the wall clock with a short
// session_ttl_min, so keep-alives really run.
func wallFakeFixture(t *testing.T) rendezvoustest.Fixture {
	const ttl = 300 * time.Millisecond
	fake := fakeconsul.New(fakeconsul.Options{MinTTL: 100 * time.Millisecond})
	t.Cleanup(fake.Close)
	return rendezvoustest.Fixture{
		Connect: func(t *testing.T) rendezvous.Store {
			return newStore(t, consulstore.Config{Address: fake.Addr(), MinTTL: 100 * time.Millisecond, WaitTime: 2 * time.Second})
		},
		TTL:    ttl,
		Expiry: ttl,
	}
}

// agentFixture is the real agent CONSUL_HTTP_ADDR names, under a prefix of
// its own; the test is skipped without one.
func agentFixture(t *testing.T) rendezvoustest.Fixture {
	prefix := fmt.Sprintf("nomad-train-test/%d/", time.Now().UnixNano())
	t.Cleanup(func() {
		st, err := consulstore.New(consulstore.Config{})
		if err == nil {
			st.Client().KV().DeleteTree(prefix, nil)
			st.Close()
		}
	})
	return rendezvoustest.Fixture{
		Connect: func(t *testing.T) rendezvous.Store {
			return newStore(t, consulstore.Config{Prefix: prefix})
		},
		TTL:    consulstore.DefaultMinTTL,
		Expiry: consulstore.DefaultMinTTL,
	}
}

func TestFakeStoreConformance(t *testing.T) {
	rendezvoustest.RunStoreConformance(t, fakeFixture)
}

func TestFakeWallClockStoreConformance(t *testing.T) {
	rendezvoustest.RunStoreConformance(t, wallFakeFixture)
}

func TestFakeRendezvousConformance(t *testing.T) {
	rendezvoustest.RunRendezvousConformance(t, fakeFixture)
}

// needAgent skips t unless CONSUL_HTTP_ADDR names a Consul agent.
func needAgent(t testing.TB) {
	if os.Getenv("CONSUL_HTTP_ADDR") == "" {
		t.Skip("CONSUL_HTTP_ADDR is not set: no Consul agent to test against")
	}
}

func TestFakeSpuriousRendezvousConformance(t *testing.T) {
	rendezvoustest.RunRendezvousConformance(t, spuriousFakeFixture)
}

func TestAgentStoreConformance(t *testing.T) {
	needAgent(t)
	rendezvoustest.RunStoreConformance(t, agentFixture)
}

func TestAgentRendezvousConformance(t *testing.T) {
	needAgent(t)
	rendezvoustest.RunRendezvousConformance(t, agentFixture)
}
